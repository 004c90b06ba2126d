// MpiRound: what a round's MPI side is on a node that hosts a PMIx server
// (the MPI room, MpiRanks, over it). Before the round's workers start, it
// starts the round's namespace and says what they start from: the inherited
// environment without an outer step's process management, the server's
// variables, and Open MPI's defaults for this host (CMA probed once, at the
// first round; oversubscription). At a rank's end it asks MpiRanks what MPI
// makes of it. A server that refuses a job is not asked again: its rounds
// run without one. Not thread-safe: the agent's thread.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/env_map.hpp"
#include "env/mpi_env.hpp"
#include "mpi/mpi_ranks.hpp"
#include "node/cma.hpp"
#include "node/identity.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

class MpiRound {
 public:
  // What the round's workers start from, where a server runs for it.
  struct Plan {
    EnvMap worker_env;                                        // the environment they inherit
    std::vector<std::pair<std::string, std::string>> shared;  // added to every worker's
    std::string rank_variable;                                // each worker's own: its rank
  };
  // All must outlive it.
  MpiRound(MpiRanks& ranks, const EnvMap& env, const NodeIdentity& self);

  // The round's namespace started (nullopt: no server runs, or it refused
  // this job, said once as a warning).
  std::optional<Plan> start(const Topology& topology, const JobLayout& layout);
  // What the host means for Open MPI this round (--report-bindings says it).
  const OpenMpiHost& host() const { return m_host; }
  // How local rank `local_rank`'s end counts, and why it failed (MpiRanks').
  ExitInfo exit(int local_rank, const ExitInfo& info, bool stopping);
  std::optional<WorkerError> error(int local_rank, double wall_now) const;

 private:
  MpiRanks* m_ranks;  // null once the server refused the job
  const EnvMap& m_env;
  const NodeIdentity& m_self;
  OpenMpiHost m_host;
  std::optional<CmaProbe> m_cma;  // probed at the first round that has a server
};

}  // namespace ddplaunch
