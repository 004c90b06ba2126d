// The Agent's seam to the rooms around it. RoundView: what the round is
// now, read by the rooms that answer about it (status, stacks, the job's
// pages) without deciding anything in it. RoundObserver: what happened in
// the round, told to the rooms that keep a record of it (the event log,
// the lost nodes status shows) in the order it happened. The Agent is the
// one RoundView and calls its observers; tests use fakes of either side.
// Both are called on the agent's thread only.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "posix/clock.hpp"
#include "rendezvous/job_link.hpp"
#include "supervise/exit_info.hpp"
#include "supervise/summary.hpp"
#include "supervise/verdict.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

class RoundView {
 public:
  // The round as this node runs it.
  struct Round {
    int node_rank = -1;  // -1 before the first round
    // Whether this node speaks for the job: node 0, or the only node.
    bool speaks_for_job = false;
    std::string_view state = "joining";  // joining, running, stopping, ending
    int round = 0;
    int restarts = 0;  // counted against --max-restarts
    int nnodes = 0;    // in the running round (0 before the first)
    int world_size = 0;
    int first_rank = 0;                  // this node's first global rank
    double start_time = 0;               // wall time this round's workers started
    double agent_start_time = 0;         // wall time the agent started
    const Topology* topology = nullptr;  // the running round's (null before the first)
  };
  // One local rank as it is now.
  struct Rank {
    int rank = -1;
    int local_rank = -1;
    pid_t pid = 0;
    std::optional<ExitInfo> exit;   // how it ended (nullopt: running)
    double end_time = 0;            // wall time it ended (0: running)
    bool stopping = false;          // the round is stopping it
    long long progress_events = 0;  // its output lines and progress-pipe writes
    Clock::TimePoint last_progress{};
    std::string last_line;
  };

  virtual ~RoundView() = default;
  virtual Round round() const = 0;
  // The running round's workers, by local rank (none before the first round).
  virtual const std::vector<pid_t>& pids() const = 0;
  // Local rank `local_rank` (< pids().size()).
  virtual Rank rank(size_t local_rank) const = 0;
};

class RoundObserver {
 public:
  virtual ~RoundObserver() = default;
  // The agent started (before joining, or before a single node's round).
  virtual void on_agent_start() {}
  // This node began to meet the others for the view's round.
  virtual void on_rendezvous_start() {}
  // The nodes met: this node is `node_rank` of `topology`; `round` says
  // which spares took a lost node's place.
  virtual void on_joined(const Topology& topology, int node_rank, const RoundStart& round) {
    (void)topology;
    (void)node_rank;
    (void)round;
  }
  // The nodes met and this node's network preflight starts (before
  // on_joined(), which follows if it passes).
  virtual void on_preflight_start(const Topology& topology, int node_rank,
                                  const RoundStart& round) {
    (void)topology;
    (void)node_rank;
    (void)round;
  }
  // This node's workers of the view's round started (the view has them).
  virtual void on_round_start() {}
  // Local rank `local_rank` ended (the view has its end).
  virtual void on_rank_exit(int local_rank, const ExitInfo& info) {
    (void)local_rank;
    (void)info;
  }
  // The job's verdict on the round, as the link gave it.
  virtual void on_verdict(const JobVerdict& verdict) { (void)verdict; }
  // The round ended with `decision`; `next`: "none", "restart", "regroup"...
  virtual void on_round_end(const Decision& decision, std::string_view next) {
    (void)decision;
    (void)next;
  }
  // The next round was counted: `kind` as on_round_end's `next`, and the
  // job's failed rounds without progress in a row.
  virtual void on_restart(std::string_view kind, int rounds_without_progress) {
    (void)kind;
    (void)rounds_without_progress;
  }
  // Node `node_rank`'s preflight ended (node 0 is told of each node's).
  virtual void on_preflight(int node_rank, double seconds,
                            const std::vector<std::string>& blocked) {
    (void)node_rank;
    (void)seconds;
    (void)blocked;
  }
  // The run ended with `summary`.
  virtual void on_job_end(const JobSummary& summary) { (void)summary; }
};

}  // namespace ddplaunch
