// The Agent's hang watch (--hang-timeout): each rank's progress, the deadline
// it sets, and what a hung rank gets. Part of agent.hpp's Agent.
#include <csignal>

#include "agent/agent.hpp"
#include "log.hpp"

namespace ddplaunch {

void Agent::count_progress(long long events) {
  if (events <= 0 || m_phase != Phase::k_running) {
    return;
  }
  const bool had = made_progress();
  m_round_progress += events;
  if (!had && made_progress() && m_link != nullptr) {
    m_link->report_progress();
  }
}

bool Agent::made_progress() const {
  return m_round_progress >= m_config.restart_min_progress;
}

void Agent::on_progress(int local_rank) {
  if (m_config.progress_restarts()) {
    count_progress(1);
  }
  if (static_cast<size_t>(local_rank) < m_last_progress.size()) {
    m_last_progress[static_cast<size_t>(local_rank)] = m_clock.now();
  }
}

void Agent::on_output_paused(int local_rank, bool paused) {
  const auto i = static_cast<size_t>(local_rank);
  if (i >= m_streams_paused.size()) {
    return;
  }
  int& count = m_streams_paused[i];
  if (paused) {
    if (count++ == 0) {
      m_paused_since[i] = m_clock.now();
    }
  } else if (count > 0 && --count == 0) {
    m_last_progress[i] += m_clock.now() - m_paused_since[i];  // the time stopped is not counted
  }
}

// Whether rank `i`'s hang clock runs: it has not ended, and the launcher
// reads its output.
bool Agent::hang_clock_runs(size_t i) const {
  return !m_supervisor->exit_of(static_cast<int>(i)) &&
         (i >= m_streams_paused.size() || m_streams_paused[i] == 0);
}

std::optional<Agent::TimePoint> Agent::hang_deadline() const {
  if (m_config.hang_timeout_s <= 0 || m_phase != Phase::k_running || !m_supervisor) {
    return std::nullopt;
  }
  if (m_hung) {
    return m_hung->kill_at;
  }
  if (m_supervisor->stopping()) {
    return std::nullopt;
  }
  std::optional<TimePoint> first;
  for (size_t i = 0; i < m_last_progress.size(); ++i) {
    if (hang_clock_runs(i) && (!first || m_last_progress[i] < *first)) {
      first = m_last_progress[i];
    }
  }
  if (first) {
    *first += millis(m_config.hang_timeout_s);
  }
  return first;
}

// A rank without progress for --hang-timeout is hung: SIGABRT makes Python's
// faulthandler (PYTHONFAULTHANDLER, set for the workers) print every thread's
// stack to its stderr, which lands in its log and the report, and ends it; it
// then fails as any rank does (and is restarted, if restarts remain). One
// that survives SIGABRT is killed after --term-timeout.
void Agent::check_hangs(TimePoint now) {
  auto due = hang_deadline();
  if (!due || now < *due) {
    return;
  }
  if (m_hung && m_hung->dumping) {
    log::warn("the debugger did not print rank {}'s stacks within {} s: going on",
              m_plan->workers.at(static_cast<size_t>(m_hung->local_rank)).rank,
              k_stack_dump_wait.count());
    abort_hung(now);
    return;
  }
  if (m_hung) {
    if (!m_supervisor->exit_of(m_hung->local_rank)) {
      log::warn("rank {} is still running {} s after SIGABRT: sending SIGKILL",
                m_plan->workers.at(static_cast<size_t>(m_hung->local_rank)).rank,
                m_config.term_timeout_s);
      m_spawner.signal(m_hung->local_rank, SIGKILL);
    }
    m_hung->kill_at = TimePoint::max();
    return;
  }
  for (size_t i = 0; i < m_last_progress.size(); ++i) {
    const int lr = static_cast<int>(i);
    if (!hang_clock_runs(i) || now - m_last_progress[i] < millis(m_config.hang_timeout_s)) {
      continue;
    }
    const double seconds = std::chrono::duration<double>(now - m_last_progress[i]).count();
    m_hung = Hung{lr, seconds, now + k_stack_dump_wait};
    const auto& w = m_plan->workers.at(i);
    // A native program's stacks come from a debugger, where one is
    // installed; Python prints its own on SIGABRT (faulthandler).
    const std::string program = std::filesystem::path(w.argv.at(0)).filename().string();
    m_hung->dumping = !program.starts_with("python") && m_spawner.dump_stacks(lr);
    log::error("rank {} on {} shows no progress for {:.1f} s: hung; {} and stopping the job",
               w.rank, node_name(), seconds,
               m_hung->dumping ? "printing its threads' native stacks, then SIGABRT"
                               : "asking it for its stacks (SIGABRT)");
    if (!m_hung->dumping) {
      abort_hung(now);
    }
    return;
  }
}

void Agent::abort_hung(TimePoint now) {
  m_hung->dumping = false;
  m_hung->kill_at = now + millis(m_config.term_timeout_s);
  m_spawner.signal(m_hung->local_rank, SIGABRT);
}

void Agent::on_stacks_dumped(int local_rank) {
  if (m_phase == Phase::k_running && m_hung && m_hung->local_rank == local_rank &&
      m_hung->dumping) {
    abort_hung(m_clock.now());
    advance();
  }
}

}  // namespace ddplaunch
