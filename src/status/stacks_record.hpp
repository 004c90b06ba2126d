// The stacks record: what one node answers to `ddplaunch stacks` (its
// ranks' processes and their stacks, and on node 0 the job's size), and
// the document the command prints once the nodes' answers are merged. The
// fields are docs/STATUS.md's ("Stacks on demand"); their JSON names live in
// one place, stacks_codec.cpp. Plain values; pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddplaunch {

// One process of a rank's tree.
struct ProcessStacks {
  long long pid = 0;
  std::string exe;
  std::string tool;    // what printed them: eu-stack, gdb, "faulthandler + gdb"; "" none
  std::string stacks;  // every thread's, as the tool printed them (bounded)
  std::string note;    // what is missing for a fuller picture, or that the tool timed out

  bool operator==(const ProcessStacks&) const = default;
};

// One rank asked about.
struct RankStacks {
  int rank = -1;
  int local_rank = -1;
  int node_rank = -1;  // set when answers are merged: the node that answered for it
  long long pid = 0;
  std::string ended;  // how it ended ("": running); no stacks then
  std::vector<ProcessStacks> processes;

  bool operator==(const RankStacks&) const = default;
};

// One node's answer.
struct NodeStacks {
  int node_rank = -1;
  std::string host;
  int round = 0;
  std::optional<int> job_nnodes;  // node 0's (or the only node's): the running round's nodes
  std::vector<RankStacks> ranks;

  bool operator==(const NodeStacks&) const = default;
};

// The merged answers of request `request`: the nodes that answered (their
// ranks moved to `ranks`), the ranks, and the nodes that did not answer.
struct StacksDocument {
  int64_t request = 0;
  std::optional<int> job_nnodes;
  std::vector<NodeStacks> nodes;
  std::vector<RankStacks> ranks;
  std::vector<int> missing;

  bool operator==(const StacksDocument&) const = default;
};

}  // namespace ddplaunch
