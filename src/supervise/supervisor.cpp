#include "supervise/supervisor.hpp"

#include "ddplaunch/error.hpp"

namespace ddplaunch {

Supervisor::Supervisor(int nworkers, std::chrono::milliseconds grace)
    : m_workers(static_cast<size_t>(nworkers)), m_grace(grace), m_running(nworkers) {}

Supervisor::Actions Supervisor::signal_running(int sig) {
  Actions actions;
  for (size_t i = 0; i < m_workers.size(); ++i) {
    if (!m_workers[i].exit && (sig == SIGKILL || !m_workers[i].taking_stacks)) {
      actions.signals.push_back({static_cast<int>(i), sig});
    }
  }
  return actions;
}

Supervisor::Actions Supervisor::begin_stop(StopReason reason, int exit_code, int sig,
                                           TimePoint now) {
  m_reason = reason;
  m_exit_code = exit_code;
  const bool kill_now = m_grace.count() == 0;
  Actions actions = signal_running(kill_now ? SIGKILL : sig);
  for (const auto& a : actions.signals) {
    m_workers[static_cast<size_t>(a.local_rank)].signalled = true;
  }
  if (kill_now) {
    m_killed = true;
  } else if (m_running > 0) {
    m_deadline = now + m_grace;
  }
  return actions;
}

Supervisor::Actions Supervisor::on_worker_exit(int local_rank, const ExitInfo& info,
                                               TimePoint now) {
  auto& w = m_workers.at(static_cast<size_t>(local_rank));
  if (w.exit) {
    return {};
  }
  w.exit = info;
  --m_running;
  Actions actions;
  if (!stopping() && !m_held && !info.success()) {
    if (info.by_signal() && is_stop_signal(info.signal())) {
      m_held = Held{local_rank, info.shell_code(), now + k_stop_hold};
    } else {
      actions = fail_first(local_rank, info.shell_code(), now);
    }
  }
  if (m_running == 0) {
    m_deadline.reset();
  }
  return actions;
}

Supervisor::Actions Supervisor::fail_first(int local_rank, int exit_code, TimePoint now) {
  m_held.reset();
  m_root_cause = local_rank;
  Actions actions = begin_stop(StopReason::k_worker_failed, exit_code, SIGTERM, now);
  actions.local_failure = true;
  return actions;
}

std::optional<Supervisor::TimePoint> Supervisor::deadline() const {
  if (m_held && (!m_deadline || m_held->until < *m_deadline)) {
    return m_held->until;
  }
  return m_deadline;
}

Supervisor::Actions Supervisor::on_launcher_signal(int sig, TimePoint now) {
  if (is_forwarded_signal(sig)) {
    return signal_running(sig);  // forwarded; the job goes on
  }
  if (!stopping()) {
    m_held.reset();  // a worker's death by a stop signal was this stop's doing
    m_stop_signal = sig;
    return begin_stop(StopReason::k_signal, 128 + sig, sig, now);
  }
  // Asked again while stopping: do not wait for the grace period.
  m_killed = true;
  m_deadline.reset();
  return signal_running(SIGKILL);
}

Supervisor::Actions Supervisor::on_remote_stop(int exit_code, TimePoint now) {
  if (stopping()) {
    return {};
  }
  m_held.reset();  // another node decided first (a scheduler's stop reached it first)
  return begin_stop(StopReason::k_remote, exit_code, SIGTERM, now);
}

Supervisor::Actions Supervisor::on_preempt(int sig, TimePoint now, bool workers_have_it) {
  if (stopping()) {
    return {};
  }
  m_held.reset();  // the scheduler may have signalled a worker too
  Actions actions = begin_stop(StopReason::k_preempted, k_exit_preempted, sig, now);
  if (workers_have_it) {
    actions.signals.clear();
  }
  return actions;
}

Supervisor::Actions Supervisor::on_deadline(TimePoint now) {
  if (m_held && now >= m_held->until) {
    return fail_first(m_held->local_rank, m_held->exit_code, now);
  }
  if (!m_deadline || now < *m_deadline) {
    return {};
  }
  m_deadline.reset();
  m_killed = true;
  return signal_running(SIGKILL);
}

}  // namespace ddplaunch
