// The Agent's hang watch (--hang-timeout): each rank's progress, the deadline
// it sets, and what a hung rank gets. Part of agent.hpp's Agent.
#include <algorithm>
#include <csignal>
#include <filesystem>

#include "agent/agent.hpp"
#include "log.hpp"
#include "supervise/hang_stacks.hpp"

namespace ddplaunch {

long long Agent::round_progress() const {
  if (m_progress_frozen) {
    return m_round_progress;
  }
  long long events = 0;
  for (size_t i = 0; i < m_pids.size() && i < m_progress_writes.size(); ++i) {
    events += m_router.lines(static_cast<int>(i)) + m_progress_writes[i];
  }
  return events;
}

bool Agent::made_progress() const {
  return round_progress() >= m_config.restart_min_progress;
}

void Agent::note_progress() {
  if (m_config.progress_restarts() && !m_progress_reported && m_phase == Phase::k_running &&
      made_progress()) {
    m_progress_reported = true;
    if (m_link != nullptr) {
      m_link->report_progress();
    }
  }
}

Agent::TimePoint Agent::last_progress(size_t i) const {
  TimePoint last = m_last_progress.at(i);
  if (const auto at = m_router.progress_at(static_cast<int>(i)); at && *at > last) {
    last = *at;
  }
  return last;
}

void Agent::on_progress(int local_rank) {
  if (static_cast<size_t>(local_rank) < m_last_progress.size()) {
    m_last_progress[static_cast<size_t>(local_rank)] = m_clock.now();
    ++m_progress_writes[static_cast<size_t>(local_rank)];
    note_progress();
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
    // The time stopped is not counted: its last progress moves on by it.
    m_last_progress[i] = last_progress(i) + (m_clock.now() - m_paused_since[i]);
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
    if (!hang_clock_runs(i)) {
      continue;
    }
    const TimePoint last = last_progress(i);
    if (!first || last < *first) {
      first = last;
    }
  }
  if (first) {
    *first += millis(m_config.hang_timeout_s);
  }
  return first;
}

// A rank without progress for --hang-timeout makes the job hung. The one
// found first is seldom the one to blame (in a collective every rank waits
// on the one that stopped elsewhere), so every rank here without progress
// for half the timeout has its stacks taken before anything is stopped.
void Agent::check_hangs(TimePoint now) {
  auto due = hang_deadline();
  if (!due || now < *due) {
    return;
  }
  if (m_hung && m_hung->dumping > 0) {
    log::warn("the debugger did not print every hung rank's stacks within {} s: going on",
              k_stack_dump_wait.count());
    abort_hung(now);
    return;
  }
  if (m_hung) {
    for (const auto& [lr, seconds] : m_hung->ranks) {
      if (!m_supervisor->exit_of(lr)) {
        log::warn("rank {} is still running {} s after SIGABRT: sending SIGKILL",
                  m_plan->workers.at(static_cast<size_t>(lr)).rank, m_config.term_timeout_s);
        m_spawner.signal(lr, SIGKILL);
      }
    }
    m_hung->kill_at = TimePoint::max();
    return;
  }
  for (size_t i = 0; i < m_last_progress.size(); ++i) {
    const auto quiet = hang_clock_runs(i) ? now - last_progress(i) : TimePoint::duration(0);
    if (quiet >= millis(m_config.hang_timeout_s)) {
      const double seconds = std::chrono::duration<double>(quiet).count();
      take_hung_stacks(now, fmt::format("rank {} on {} shows no progress for {:.1f} s: the job is "
                                        "hung",
                                        m_plan->workers.at(i).rank, node_name(), seconds));
      return;
    }
  }
}

void Agent::take_hung_stacks(TimePoint now, const std::string& why) {
  Hung hung{{}, now + k_stack_dump_wait, 0};
  std::vector<int> ranks;
  bool native = false;
  bool no_debugger = false;  // a native rank whose stacks no debugger can print
  for (size_t i = 0; i < m_last_progress.size(); ++i) {
    const auto quiet = now - last_progress(i);
    if (!hang_clock_runs(i) || quiet < millis(m_config.hang_timeout_s) / 2) {
      continue;
    }
    const int lr = static_cast<int>(i);
    hung.ranks.emplace_back(lr, std::chrono::duration<double>(quiet).count());
    ranks.push_back(m_plan->workers.at(i).rank);
    m_supervisor->taking_stacks(lr);
    m_router.keep_stderr_lines(lr, k_stack_lines);
    // A native program's stacks come from a debugger, where one is
    // installed; Python prints its own on SIGABRT (faulthandler).
    const auto& argv = m_plan->workers.at(i).argv;
    if (!std::filesystem::path(argv.at(0)).filename().string().starts_with("python")) {
      if (m_spawner.dump_stacks(lr)) {
        ++hung.dumping;
        native = true;
      } else {
        no_debugger = true;
      }
    }
  }
  if (hung.ranks.empty()) {
    return;  // nothing here is without progress (another node's verdict)
  }
  std::string list;
  for (const int r : ranks) {
    list += (list.empty() ? "" : ",") + std::to_string(r);
  }
  log::error(
      "{}; taking the stacks of every rank here without progress for {:.1f} s or more "
      "(rank{} {}){}, then stopping the job",
      why, m_config.hang_timeout_s / 2, ranks.size() == 1 ? "" : "s", list,
      native        ? ": a debugger prints native stacks, then SIGABRT"
      : no_debugger ? " with SIGABRT (no eu-stack, gdb or cuda-gdb on PATH to print native "
                      "stacks: install elfutils)"
                    : " with SIGABRT");
  m_hung = std::move(hung);
  if (m_hung->dumping == 0) {
    abort_hung(now);
  }
}

void Agent::abort_hung(TimePoint now) {
  m_hung->dumping = 0;
  m_hung->kill_at = now + millis(m_config.term_timeout_s);
  for (const auto& [lr, seconds] : m_hung->ranks) {
    if (!m_supervisor->exit_of(lr)) {
      m_spawner.signal(lr, SIGABRT);
    }
  }
}

void Agent::on_stacks_dumped(int local_rank, pid_t debugger) {
  (void)debugger;
  if (m_phase == Phase::k_running && m_hung && m_hung->dumping > 0 && is_hung(local_rank) &&
      --m_hung->dumping == 0) {
    abort_hung(m_clock.now());
    advance();
  }
}

bool Agent::is_hung(int local_rank) const {
  return m_hung && std::any_of(m_hung->ranks.begin(), m_hung->ranks.end(),
                               [&](const auto& r) { return r.first == local_rank; });
}

std::optional<int> Agent::local_hang_culprit() const {
  if (!m_hung) {
    return std::nullopt;
  }
  std::vector<RankOutcome> hung;
  for (const auto& [lr, seconds] : m_hung->ranks) {
    hung.push_back(outcome(lr));
  }
  const auto i = hang_culprit(hung);
  return i ? std::optional<int>(hung[*i].local_rank) : std::nullopt;
}

}  // namespace ddplaunch
