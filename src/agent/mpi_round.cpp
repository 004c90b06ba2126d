#include "agent/mpi_round.hpp"

#include "cluster/nodelist.hpp"
#include "env/scheduler_env.hpp"
#include "log.hpp"

namespace ddplaunch {

MpiRound::MpiRound(MpiRanks& ranks, const EnvMap& env, const NodeIdentity& self)
    : m_ranks(&ranks), m_env(env), m_self(self) {}

std::optional<MpiRound::Plan> MpiRound::start(const Topology& topology, const JobLayout& layout) {
  if (m_ranks == nullptr) {
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
  m_host.job_dir = m_self.job_dir;
  m_host.cma = m_cma->works;
  m_host.cma_why = m_cma->why;
  // Every agent of the job on this host starts as many ranks: theirs count.
  m_host.oversubscribed = m_self.usable_cpus > 0 && job.host_ranks > m_self.usable_cpus;
  MpiRoundEnv env;
  try {
    env = m_ranks->start_round(job);
  } catch (const std::exception& e) {
    // Only MPI programs need it: the job goes on, and says why theirs fail.
    log::warn("the PMIx server refused this job ({}): MPI programs will not initialise", e.what());
    m_ranks = nullptr;
    return std::nullopt;
  }
  if (env.shared.empty()) {
    return std::nullopt;  // no server runs (said once in the debug log)
  }
  Plan plan;
  plan.worker_env = m_env;
  for (auto it = plan.worker_env.begin(); it != plan.worker_env.end();) {
    it = is_outer_step_identity(it->first) ? plan.worker_env.erase(it) : std::next(it);
  }
  // What the user set, as the workers will see it (an outer mpirun's own
  // settings are not the user's).
  EnvMap user = m_env;
  strip_outer_mpi_identity(user);
  plan.shared = std::move(env.shared);
  for (auto& setting : open_mpi_defaults(user, layout, m_host)) {
    plan.shared.push_back(std::move(setting));
  }
  plan.rank_variable = std::move(env.rank_variable);
  return plan;
}

ExitInfo MpiRound::exit(int local_rank, const ExitInfo& info, bool stopping) {
  return m_ranks != nullptr ? m_ranks->exit(local_rank, info, stopping) : info;
}

std::optional<WorkerError> MpiRound::error(int local_rank, double wall_now) const {
  return m_ranks != nullptr ? m_ranks->error(local_rank, wall_now) : std::nullopt;
}

}  // namespace ddplaunch
