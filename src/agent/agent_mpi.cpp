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

ExitInfo Agent::mpi_exit(int local_rank, const ExitInfo& info) {
  return m_mpi != nullptr ? m_mpi->exit(local_rank, info, m_supervisor->stopping()) : info;
}

std::optional<WorkerError> Agent::mpi_error(int local_rank) const {
  return m_mpi != nullptr ? m_mpi->error(local_rank, m_clock.wall_now()) : std::nullopt;
}

}  // namespace ddplaunch
