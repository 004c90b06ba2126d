// The status record: what one node answers to `ddplaunch status` (its
// agent, its ranks, and on node 0 the job), and the document the command,
// /status.json and the live page show once the nodes' answers are merged.
// The fields are docs/STATUS.md's; their JSON names live in one place,
// status_codec.cpp. Plain values; pure.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddplaunch {

// A node the job lost (node 0 keeps the last 1,024).
struct LostNodeStatus {
  int node_rank = -1;  // in the round it was lost in
  std::string host;
  std::string addr;
  int round = 0;
  double time = 0;  // wall time it was found lost

  bool operator==(const LostNodeStatus&) const = default;
};

// The job, as node 0 (or the only node) knows it.
struct JobStatus {
  std::string run_id;
  int round = 0;
  int restarts = 0;
  int max_restarts = 0;
  int nnodes = 0;               // in the running round
  std::string nnodes_expected;  // "2", or "1:4" for an elastic job
  int world_size = 0;
  double start_time = 0;  // wall time node 0's agent started
  double elapsed_s = 0;
  std::vector<LostNodeStatus> lost_nodes;
  // The tree of agents' fan-out where the answers travel through it (more
  // than fan-out + 1 nodes); 0: every node answers on node 0's store.
  int tree_fanout = 0;

  bool operator==(const JobStatus&) const = default;
};

// One rank, as its node's agent sees it now.
struct RankStatus {
  int rank = -1;
  int local_rank = -1;
  int node_rank = -1;  // set when answers are merged: the node that answered for it
  long long pid = 0;
  std::string state;  // running, stopped, stopping, succeeded, failed, signaled
  double run_s = 0;
  long long progress_events = 0;           // output lines and DDPLAUNCH_PROGRESS_FD writes
  std::optional<double> since_progress_s;  // none once it ended
  std::string last_line;
  double cpu_s = 0;
  double cpu_percent = 0;
  long long rss_kib = 0;
  int processes = 0;
  std::optional<std::string> exit;                     // how it ended
  std::optional<unsigned long long> gpu_memory_bytes;  // where NVML is present

  bool operator==(const RankStatus&) const = default;
};

// One node's answer.
struct NodeStatus {
  int node_rank = -1;
  std::string host;
  std::string addr;
  std::string state;                   // joining, running, stopping, ending; "lost" in a document
  std::optional<long long> agent_pid;  // none for a lost node
  double agent_cpu_s = 0;
  long long agent_rss_kib = 0;
  int round = 0;
  double round_start_time = 0;
  int local_ranks = 0;
  std::optional<JobStatus> job;  // node 0's, or the only node's
  std::vector<RankStatus> ranks;

  bool operator==(const NodeStatus&) const = default;
};

// What a request asks: the ranks and nodes to show (none: all).
struct StatusRequest {
  std::optional<std::set<int>> ranks;
  std::optional<std::set<int>> nodes;
  double timeout_s = 30;  // how long the command waits for the answers

  bool operator==(const StatusRequest&) const = default;
};

// The nodes' answers put together: the job (node 0's), every node (its
// ranks moved to `ranks`, each marked with its node), the nodes the job
// lost (state "lost"), and the nodes asked that did not answer.
struct StatusDocument {
  int64_t request = 0;
  std::optional<JobStatus> job;
  std::vector<NodeStatus> nodes;
  std::vector<RankStatus> ranks;
  std::vector<int> missing;

  bool operator==(const StatusDocument&) const = default;
};

}  // namespace ddplaunch
