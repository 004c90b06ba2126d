#include "proc/spawner.hpp"

#include <csignal>
#include <set>
#include <string>
#include <thread>

#include "config/launch_error.hpp"
#include "proc/guard.hpp"
#include "proc/reap.hpp"
#include "proc/spawn.hpp"
#include "proc/starter.hpp"

namespace ddplaunch {

std::vector<pid_t> ProcessSpawner::spawn(const std::vector<WorkerSpec>& workers) {
  m_children.clear();  // the last round's, ended: before the new pipes take their fd numbers
  m_children = spawn_workers(workers);
  ++m_generation;
  std::vector<pid_t> pids;
  for (const auto& c : m_children) {
    pids.push_back(c.pid());
  }
  return pids;
}

void ProcessSpawner::signal(int local_rank, int sig) {
  m_children.at(static_cast<size_t>(local_rank)).signal(sig);
}

void ProcessSpawner::kill_all() {
  // Grandchildren left in a worker's group go with it; those that escaped it
  // were reparented to us (a subreaper) and are found by the sweep.
  for (const auto& c : m_children) {
    c.signal(SIGKILL);
  }
  for (int round = 0; round < 8 && kill_stray_children(m_spared) > 0; ++round) {
    while (auto reaped = reap_any()) {
      if (auto lr = local_rank_of(reaped->first)) {
        m_children[static_cast<size_t>(*lr)].mark_reaped();
      } else {
        debugger_of(reaped->first);  // a debugger the sweep killed: never signalled again
      }
    }
  }
}

std::vector<pid_t> ProcessSpawner::reclaim(std::chrono::milliseconds timeout, int& killed) {
  killed = 0;
  std::vector<pid_t> left;
  if (m_marker.empty()) {
    return left;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::set<pid_t> seen;
  int strays = 0;
  while (true) {
    left = kill_marked_once(m_marker);
    seen.insert(left.begin(), left.end());
    strays += kill_stray_children(m_spared);
    while (auto reaped = reap_any()) {  // the killed ones reparented to us: no zombie is left
      debugger_of(reaped->first);       // a debugger it swept: never signalled again
    }
    if (left.empty() || std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the killed ones go
  }
  killed = static_cast<int>(seen.size()) + strays;
  return left;
}

bool ProcessSpawner::dump_stacks(int local_rank) {
  const std::string pid = std::to_string(m_children.at(static_cast<size_t>(local_rank)).pid());
  // Its stderr pipe, opened anew through /proc: the debugger writes where
  // the worker does.
  return start_debugger(
             local_rank,
             {{"eu-stack", "-p", pid},
              {"gdb", "-p", pid, "-batch", "-nx", "-q", "-ex", "thread apply all bt"},
              {"cuda-gdb", "-p", pid, "-batch", "-nx", "-q", "-ex", "thread apply all bt"}},
             "/proc/" + pid + "/fd/2")
      .has_value();
}

std::optional<Spawner::Debugger> ProcessSpawner::start_debugger(
    int local_rank, const std::vector<std::vector<std::string>>& candidates,
    const std::string& output_path) {
  ChildStart start;
  start.output_path = output_path;
  // In the launcher's process group: a worker's may be the one being stopped.
  start.own_group = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    start.argv = candidates[i];
    try {
      m_debuggers.emplace_back(ProcessStarter().start(start), local_rank);
      return Debugger{m_debuggers.back().first.pid(), i};
    } catch (const LaunchError&) {
      // not installed: the next one
    }
  }
  return std::nullopt;
}

void ProcessSpawner::stop_debugger(pid_t pid) {
  for (const auto& [debugger, local_rank] : m_debuggers) {
    if (debugger.pid() == pid) {
      debugger.signal(SIGKILL);
    }
  }
}

std::optional<int> ProcessSpawner::debugger_of(pid_t pid) {
  for (auto it = m_debuggers.begin(); it != m_debuggers.end(); ++it) {
    if (it->first.pid() == pid) {
      const int local_rank = it->second;
      it->first.mark_reaped();
      m_debuggers.erase(it);
      return local_rank;
    }
  }
  return std::nullopt;
}

std::optional<int> ProcessSpawner::local_rank_of(pid_t pid) const {
  for (size_t i = 0; i < m_children.size(); ++i) {
    if (m_children[i].pid() == pid) {
      return static_cast<int>(i);
    }
  }
  return std::nullopt;
}

std::optional<std::pair<pid_t, ExitInfo>> ProcessSpawner::reap() {
  return reap_any();
}

}  // namespace ddplaunch
