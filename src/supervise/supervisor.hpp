// Supervisor: the supervision rules as a pure state machine. It is told what
// happened (a worker ended, the launcher got a signal, another node failed,
// a deadline passed) and answers with the signals to send. It makes no
// system calls and reads no clock, so every rule is unit-tested with tables;
// the Agent (agent/agent.hpp) feeds it events. Not thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "supervise/exit_info.hpp"
#include "supervise/signal_policy.hpp"

namespace ddplaunch {

enum class StopReason {
  k_none,           // still running, or every worker succeeded
  k_worker_failed,  // a worker on this node failed first (the root cause is local)
  k_signal,         // the launcher was told to stop (SIGINT, SIGTERM, SIGHUP, SIGQUIT)
  k_remote,         // another node failed or was lost; it decided the exit code
  k_preempted,      // --preempt-signal reached a node: every rank was told to checkpoint and exit
};

class Supervisor {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Send `sig` to the process group of worker `local_rank`.
  struct SignalAction {
    int local_rank;
    int sig;
    bool operator==(const SignalAction&) const = default;
  };
  struct Actions {
    std::vector<SignalAction> signals;
    bool local_failure = false;  // this event made a local worker the root cause
  };

  // How long a worker killed by a stop signal (SIGTERM from scancel, say)
  // is held before it counts as the root cause: a scheduler that stops the
  // job signals the launcher and the workers alike, in no set order, and the
  // launcher's own signal must win over the deaths it causes.
  static constexpr std::chrono::milliseconds k_stop_hold{300};

  Supervisor(int nworkers, std::chrono::milliseconds grace);

  Actions on_worker_exit(int local_rank, const ExitInfo& info, TimePoint now);
  Actions on_launcher_signal(int sig, TimePoint now);
  // Another node decided the job is over with `exit_code`.
  Actions on_remote_stop(int exit_code, TimePoint now);
  // The job is preempted (--preempt-signal, on this node or another):
  // `sig` to every running worker, which then has the grace period to
  // checkpoint and exit before SIGKILL; the exit code is k_exit_preempted
  // whatever the workers' (an exit 0 is a clean preemption, not a success).
  // `workers_have_it`: the scheduler sent `sig` to the workers itself; only
  // the grace period's SIGKILL is sent.
  Actions on_preempt(int sig, TimePoint now, bool workers_have_it = false);
  // Call when now >= deadline(): a held worker becomes the root cause
  // (local_failure), or SIGKILL for whoever ignored SIGTERM.
  Actions on_deadline(TimePoint now);

  // --hang-timeout: the launcher takes this worker's stacks and then ends it
  // with SIGABRT itself; a stop spares it its SIGTERM, which would cut the
  // stacks short (only the grace period's SIGKILL still reaches it).
  void taking_stacks(int local_rank) { m_workers.at(local_rank).taking_stacks = true; }

  // When on_deadline() must be called; nullopt when nothing is pending.
  std::optional<TimePoint> deadline() const;
  // Every worker ended and none is held.
  bool finished() const { return m_running == 0 && !m_held; }
  bool stopping() const { return m_reason != StopReason::k_none; }
  StopReason reason() const { return m_reason; }
  int exit_code() const { return m_exit_code; }
  std::optional<int> root_cause() const { return m_root_cause; }
  std::optional<int> stop_signal() const { return m_stop_signal; }
  // True when the worker was still running when the launcher signalled it to stop.
  bool stopped_by_launcher(int local_rank) const { return m_workers.at(local_rank).signalled; }
  const std::optional<ExitInfo>& exit_of(int local_rank) const {
    return m_workers.at(local_rank).exit;
  }

 private:
  struct WorkerState {
    std::optional<ExitInfo> exit;
    bool signalled = false;
    bool taking_stacks = false;
  };
  Actions begin_stop(StopReason reason, int exit_code, int sig, TimePoint now);
  Actions fail_first(int local_rank, int exit_code, TimePoint now);
  Actions signal_running(int sig);

  std::vector<WorkerState> m_workers;
  std::chrono::milliseconds m_grace;
  int m_running;
  StopReason m_reason = StopReason::k_none;
  int m_exit_code = 0;
  std::optional<int> m_root_cause;
  std::optional<int> m_stop_signal;
  std::optional<TimePoint> m_deadline;
  // A worker killed by a stop signal, not yet the root cause (k_stop_hold).
  struct Held {
    int local_rank;
    int exit_code;
    TimePoint until;
  };
  std::optional<Held> m_held;
  bool m_killed = false;
};

}  // namespace ddplaunch
