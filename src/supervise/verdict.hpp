// The job's verdict and how it merges with what this node saw. In a
// multi-node job the first node to decide (a failing rank, a stop signal, a
// lost node, or every node's success) publishes a JobVerdict through the
// store, and every node ends with it. merge_verdict() is the one rule that
// turns this node's own ending and the job's verdict into its exit code and
// report. Plain values and pure functions.
#pragma once

#include <optional>
#include <string>

#include "supervise/summary.hpp"

namespace ddplaunch {

struct JobVerdict {
  int exit_code = 0;
  std::string message;                    // empty for success, or when root_cause says it all
  std::optional<RankOutcome> root_cause;  // the failing rank, when it was a worker
  int node = -1;                          // the node that decided; -1 when unknown
  int lost = -1;                          // the node found lost (exit 4), if one was
  // An elastic job's membership changes (a node joined): not a failure; the
  // nodes meet again at once without using a restart.
  bool regroup = false;
  // With --restart-min-progress: whether the round made progress, as the
  // node that published the verdict read it from the store (-1: unknown).
  int progress = -1;
  // --preempt-signal: the signal that preempted the job (every node sends
  // it to its ranks); 0: not a preemption.
  int preempt = 0;
  // The scheduler sent `preempt` to every rank itself (Slurm signals every
  // process of a job step): the nodes do not send it again.
  bool preempt_delivered = false;
  bool success() const { return exit_code == 0 && message.empty() && !root_cause && !regroup; }
  bool operator==(const JobVerdict&) const = default;
};

// How this node's own run ended (its Supervisor's view).
struct LocalEnd {
  StopReason reason = StopReason::k_none;
  int exit_code = 0;
  std::optional<RankOutcome> root_cause;  // a local rank that failed first here
  std::optional<int> stop_signal;         // the stop signal this launcher received
  // A stop signal received after the verdict was known (while finishing or
  // gathering results): this node exits 128+N, the report keeps the verdict.
  std::optional<int> late_signal;
};

struct Decision {
  int exit_code = 0;
  StopReason reason = StopReason::k_none;
  std::optional<RankOutcome> root_cause;
  std::string message;
  std::optional<int> stop_signal;
};

// `job` is the verdict in force (nullopt for one node, or when the store
// never confirmed one); `node_rank` is this node's.
Decision merge_verdict(const LocalEnd& local, const std::optional<JobVerdict>& job, int node_rank);

enum class NextRound {
  k_none,                 // the job ends
  k_restart,              // every node meets again; one restart is used
  k_regroup,              // an elastic job meets again to admit a node; no restart is used
  k_restart_no_progress,  // a rank failed in a round without progress: one of those is used
  k_stalled,  // the job ends: its rounds without progress are spent (exit k_exit_no_requeue)
};

// The restarts a job may still use, the same on every node.
struct RestartBudget {
  int restarts = 0;              // used before this round (--max-restarts counts these)
  int max_restarts = 0;          // --max-restarts
  bool follow_progress = false;  // --restart-min-progress given
  int no_progress = 0;           // failed rounds without progress in a row, before this one
  int max_no_progress = 3;       // --max-no-progress-restarts
};

// What follows a round that ended with `decision` under the job's verdict
// `job` (nullopt for one node), with `budget`:
// k_regroup when the verdict says so (the store host asks only while
// restarts remain); k_restart when restarts remain and a rank failed
// (torchrun's rule: a worker's failure; never a stop signal, a program that
// cannot start or an internal error) or, in an elastic job, another node
// than this one and the store host was lost; else k_none. Following
// progress, a rank's failure in a round the verdict says made no progress
// is k_restart_no_progress while those remain (k_stalled after), whatever
// --max-restarts has left. `progress` is this round's (the verdict's where
// it says; one node: its own). Every node of a job decides alike: the
// verdict and the budget are the same everywhere.
NextRound next_round_after(const Decision& decision, const std::optional<JobVerdict>& job,
                           bool elastic, int node_rank, const RestartBudget& budget, bool progress);

}  // namespace ddplaunch
