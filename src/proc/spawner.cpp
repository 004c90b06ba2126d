#include "proc/spawner.hpp"

#include <csignal>

#include "proc/reap.hpp"
#include "proc/spawn.hpp"

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
      }
    }
  }
}

std::optional<int> ProcessSpawner::local_rank_of(pid_t pid) const {
  for (size_t i = 0; i < m_children.size(); ++i) {
    if (m_children[i].pid() == pid) {
      return static_cast<int>(i);
    }
  }
  return std::nullopt;
}

}  // namespace ddplaunch
