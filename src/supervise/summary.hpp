// The outcome of a run: every rank's end, the root cause, the job's topology,
// and the failure report printed for humans on stderr. Plain values and pure
// formatting; the JSON forms live in output/report_json.hpp.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "supervise/exit_info.hpp"
#include "supervise/supervisor.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// What a failing rank wrote to its TORCHELASTIC_ERROR_FILE (PyTorch's
// @record): its exception, its Python traceback, and when.
struct WorkerError {
  std::string message;    // "ValueError: loss is nan"
  std::string traceback;  // extraInfo.py_callstack; may be empty
  std::string timestamp;  // extraInfo.timestamp, seconds since the epoch as text
  bool operator==(const WorkerError&) const = default;
};

struct RankOutcome {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string host;
  pid_t pid = -1;
  std::optional<ExitInfo> exit;      // nullopt if it never ended (a lost node's ranks)
  bool stopped_by_launcher = false;  // it was still running when ddplaunch stopped the job
  double start_time = 0;             // seconds since the Unix epoch
  double end_time = 0;
  // The root cause's last k_report_lines; another rank that failed by
  // itself: its fold_tail() (the report folds those alike); others: none.
  std::vector<std::string> last_stderr;
  std::optional<WorkerError> error;  // root cause only, when it wrote its error file
  double hung_for_s = 0;   // --hang-timeout found it hung after this long without progress
  std::string stack = {};  // a hung rank's main thread's stack (supervise/hang_stacks.hpp)
  // It exited 0 after the job was preempted (--preempt-signal): a clean
  // preemption, neither a success nor a failure.
  bool preempted = false;
  bool operator==(const RankOutcome&) const = default;
};

// A failed rank's stderr as the failure report compares it with the other
// ranks': its last k_fold_lines lines, each cut to k_fold_line_bytes (at a
// character's start). Every node's results carry these for its ranks that
// failed by themselves, at most k_fold_node_bytes of them a node, so that
// node 0 reads a bounded record from each of 16,384 nodes.
inline constexpr size_t k_fold_lines = 3;
inline constexpr size_t k_fold_line_bytes = 160;
inline constexpr size_t k_fold_node_bytes = 2048;
std::vector<std::string> fold_tail(const std::vector<std::string>& lines);

// Whether `o` failed by itself: an exit code other than 0, or a signal
// ddplaunch did not send (a rank it stopped that still exits with a code
// of its own, as one that ignores SIGTERM does, counts). A hung rank did
// not: ddplaunch asked for its stacks, which the report shows.
bool failed_by_itself(const RankOutcome& o);

// Keeps in each of a node's `ranks` (their last_stderr: whole tails) the
// fold_tail() of those that failed by themselves, while the node's
// k_fold_node_bytes last, and clears the others'.
void keep_fold_tails(std::vector<RankOutcome>& ranks);

// A round of the job (the first run, or a restart) and how it ended.
struct RoundSummary {
  int round = 0;
  int nnodes = 0;        // the nodes it ran on
  bool regroup = false;  // it ended for an elastic job to admit a node: no restart used
  int exit_code = 0;
  std::optional<RankOutcome> root_cause;  // the rank whose failure ended it
  std::string message;                    // why it ended, when no rank is to blame
  double start_time = 0;
  double end_time = 0;
  // With --restart-min-progress: this node's progress events in it, and
  // whether the round made progress (the job's view); -1: not followed.
  long long progress_events = -1;
  std::optional<bool> made_progress;
  // The spares it started with in the place of nodes the last round lost.
  std::vector<NodeReplacement> replaced{};
  bool operator==(const RoundSummary&) const = default;
};

// How this node's health check (--health-check) went.
struct HealthCheckResult {
  std::string command;
  bool ok = false;
  // "passed", "failed with exit code 3", "failed with signal SIGSEGV (11)",
  // "timed out after 60 s", "could not start".
  std::string status;
  std::vector<std::string> output;  // its last lines (at most k_health_check_lines)
  double seconds = 0;
  // One line for the report: "'CMD' failed with exit code 3: <its last line>".
  std::string describe() const;
};

inline constexpr size_t k_health_check_lines = 20;  // the output lines kept

struct JobSummary {
  std::string run_id;
  int exit_code = 0;
  StopReason reason = StopReason::k_none;
  std::optional<int> stop_signal;         // the signal that stopped this launcher
  std::optional<RankOutcome> root_cause;  // the first failing rank, on any node
  std::string message;                    // why the job ended, when no rank is to blame
  double start_time = 0;
  double end_time = 0;
  std::optional<Topology> topology;  // the job's shape, once known
  std::vector<RankOutcome> ranks;    // ranks known here, by rank (of the last round)
  long launcher_max_rss_kib = 0;
  int max_restarts = 0;
  std::vector<RoundSummary> rounds;               // every round this node ran workers in
  int restarts = 0;                               // the restarts the job used
  std::optional<HealthCheckResult> health_check;  // --health-check's, on this node
};

// "rank 3 (node 1) exited with exit code 7": what ended a round.
std::string describe_round_end(const RoundSummary& round);

// "none", "worker_failed", "signal", "remote".
const char* stop_reason_name(StopReason reason);

// The report printed to stderr when the job did not succeed: root cause, its
// last stderr lines, then one line per other rank. Empty for success.
std::string format_failure_report(const JobSummary& summary);

// One line for a rank's outcome: "rank 2 (node 0, local rank 2, pid 17): exit code 0".
std::string describe_outcome(const RankOutcome& outcome);

}  // namespace ddplaunch
