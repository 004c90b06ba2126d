// The Agent's MPI side: the round's PMIx namespace before its workers start,
// and what MPI_Abort and a missing MPI_Finalize make of a worker's end.
#include "agent/agent.hpp"
#include "cluster/nodelist.hpp"
#include "env/mpi_env.hpp"
#include "env/scheduler_env.hpp"
#include "log.hpp"

namespace ddplaunch {

std::optional<MpiRoundEnv> Agent::start_mpi_round(const Topology& topology,
                                                  const JobLayout& layout) {
  m_mpi_state.assign(static_cast<size_t>(layout.local_world_size), MpiState{});
  if (m_mpi == nullptr) {
    return std::nullopt;
  }
  // The plan's host list was checked when it was read.
  std::vector<std::string> hosts =
      topology.host_list.empty() ? std::vector<std::string>{} : expand_nodelist(topology.host_list);
  hosts.resize(static_cast<size_t>(layout.nnodes));
  for (const auto& node : topology.nodes) {
    if (node.node_rank >= 0 && node.node_rank < layout.nnodes) {
      hosts[static_cast<size_t>(node.node_rank)] = node.host;
    }
  }
  const PmixJob job = make_pmix_job(layout, hosts);
  if (!m_cma) {
    m_cma = m_self.probe_cma ? m_self.probe_cma() : CmaProbe{false, "not probed"};
  }
  m_open_mpi.job_dir = m_self.job_dir;
  m_open_mpi.cma = m_cma->works;
  m_open_mpi.cma_why = m_cma->why;
  // Every agent of the job on this host starts as many ranks: theirs count.
  m_open_mpi.oversubscribed = m_self.usable_cpus > 0 && job.host_ranks > m_self.usable_cpus;
  try {
    MpiRoundEnv env = m_mpi->start_round(job);
    if (env.shared.empty()) {
      return std::nullopt;  // no server runs (said once in the debug log)
    }
    return env;
  } catch (const std::exception& e) {
    // Only MPI programs need it: the job goes on, and says why theirs fail.
    log::warn("the PMIx server refused this job ({}): MPI programs will not initialise", e.what());
    m_mpi = nullptr;
    return std::nullopt;
  }
}

EnvMap Agent::mpi_worker_env() const {
  EnvMap env = m_env;
  for (auto it = env.begin(); it != env.end();) {
    it = is_outer_step_identity(it->first) ? env.erase(it) : std::next(it);
  }
  return env;
}

std::vector<std::pair<std::string, std::string>> Agent::mpi_runtime_env(
    const JobLayout& layout, std::vector<std::pair<std::string, std::string>> shared) const {
  // What the user set, as the workers will see it (an outer mpirun's own
  // settings are not the user's).
  EnvMap user = m_env;
  strip_outer_mpi_identity(user);
  for (auto& setting : open_mpi_defaults(user, layout, m_open_mpi)) {
    shared.push_back(std::move(setting));
  }
  return shared;
}

void Agent::on_mpi() {
  if (m_mpi == nullptr) {
    return;
  }
  for (auto& e : m_mpi->handle_upcalls()) {
    const int local = m_plan ? e.rank - m_plan->layout.rank_offset : -1;
    if (local < 0 || static_cast<size_t>(local) >= m_mpi_state.size()) {
      continue;
    }
    MpiState& s = m_mpi_state[static_cast<size_t>(local)];
    switch (e.kind) {
      case MpiEvent::Kind::k_connected:
        s.connected = true;
        break;
      case MpiEvent::Kind::k_finalized:
        s.finalized = true;
        break;
      case MpiEvent::Kind::k_aborted:
        if (!s.aborted) {
          log::debug("rank {} called MPI_Abort with error code {}: {}", e.rank, e.status,
                     e.message);
          s.aborted = std::make_pair(e.status, std::move(e.message));
        }
        break;
    }
  }
}

ExitInfo Agent::mpi_exit(int local_rank, const ExitInfo& info) {
  on_mpi();  // what it told its server before it ended is queued by now
  if (static_cast<size_t>(local_rank) >= m_mpi_state.size()) {
    return info;
  }
  MpiState& s = m_mpi_state[static_cast<size_t>(local_rank)];
  if (s.aborted) {
    // mpirun's rule: the job ends with the error code MPI_Abort was given
    // (as an exit code: its low byte, and 1 for a code of 0).
    const int code = s.aborted->first & 0xff;
    return ExitInfo::exited(code != 0 ? code : 1);
  }
  if (s.connected && !s.finalized && info.success() && !m_supervisor->stopping()) {
    s.skipped_finalize = true;
    return ExitInfo::exited(1);
  }
  return info;
}

std::optional<WorkerError> Agent::mpi_error(int local_rank) const {
  if (static_cast<size_t>(local_rank) >= m_mpi_state.size()) {
    return std::nullopt;
  }
  const MpiState& s = m_mpi_state[static_cast<size_t>(local_rank)];
  WorkerError error;
  error.timestamp = std::to_string(static_cast<long long>(m_clock.wall_now()));
  if (s.aborted) {
    error.message = "MPI_Abort with error code " + std::to_string(s.aborted->first);
    if (!s.aborted->second.empty() && s.aborted->second != "N/A") {
      error.message += ": " + s.aborted->second;
    }
    return error;
  }
  if (s.skipped_finalize) {
    error.message =
        "an MPI error: it exited with code 0 after MPI_Init without calling MPI_Finalize (a "
        "failure, as under mpirun: its peers would wait for it forever)";
    return error;
  }
  return std::nullopt;
}

}  // namespace ddplaunch
