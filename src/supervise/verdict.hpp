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
  bool success() const { return exit_code == 0 && message.empty() && !root_cause; }
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

// Whether round `round`, which ended with `decision`, is followed by another
// (--max-restarts): a rank failed (torchrun's rule: a worker's failure; never
// a stop signal, a lost node, a program that cannot start or an internal
// error) and restarts remain. Every node of a job decides alike: the job's
// verdict, the round and --max-restarts are the same everywhere.
bool restarts_after(const Decision& decision, int round, int max_restarts);

}  // namespace ddplaunch
