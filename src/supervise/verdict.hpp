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
  k_none,     // the job ends
  k_restart,  // every node meets again; one restart is used
  k_regroup,  // an elastic job meets again to admit a node; no restart is used
};

// What follows a round that ended with `decision` under the job's verdict
// `job` (nullopt for one node), `restarts` having been used before it:
// k_regroup when the verdict says so (the store host asks only while
// restarts remain); k_restart when restarts remain and a rank failed
// (torchrun's rule: a worker's failure; never a stop signal, a program that
// cannot start or an internal error) or, in an elastic job, another node
// than this one and the store host was lost; else k_none. Every node of a
// job decides alike: the verdict, the restarts used and --max-restarts are
// the same everywhere.
NextRound next_round_after(const Decision& decision, const std::optional<JobVerdict>& job,
                           bool elastic, int node_rank, int restarts, int max_restarts);

}  // namespace ddplaunch
