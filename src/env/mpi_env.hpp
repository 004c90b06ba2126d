// The mpi style of worker environment (--env-style mpi): the variables Open
// MPI gives each process, so that frameworks that find their rank that way
// (Horovod's and DeepSpeed's launch-free modes, Azure ML's documented
// Lightning and DeepSpeed set-ups) agree with RANK. They let a framework find
// its rank; they do not make MPI_Init join one job: the PMIx server each
// agent hosts does (src/mpi/), with the Open MPI settings below. Pure.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/env_map.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/NODE_RANK (Open MPI's
// NODE_RANK is the rank among the processes of this node, the local rank),
// AZ_BATCH_MASTER_NODE=MASTER_ADDR:MASTER_PORT and AZ_BATCHAI_MPI_MASTER_NODE.
void add_mpi_env(EnvMap& env, const JobLayout& layout, int local_rank);

// What Open MPI needs when ddplaunch, not mpirun, starts it (docs/MPI.md):
// TCP on the interface the nodes reach each other by (Open MPI skips
// loopback by default), no single-copy shared memory (it needs ptrace rights
// containers refuse), its session files in this node's job directory, and,
// where several nodes share a host, its shared-memory files there too. Each
// only where `env` (the user's) sets none of that parameter's family.
std::vector<std::pair<std::string, std::string>> open_mpi_defaults(const EnvMap& env,
                                                                   const JobLayout& layout,
                                                                   bool cohosted,
                                                                   const std::string& job_dir);

// The variables by which an MPI library finds an outer launch step's process
// management (PMI-1/2's PMI_*, Slurm's PMIx plugin's SLURM_PMIX*): a worker of
// ddplaunch's must find only ddplaunch's PMIx server. (PMIX_* are replaced.)
bool is_outer_step_identity(const std::string& name);

}  // namespace ddplaunch
