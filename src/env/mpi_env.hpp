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

// What mpirun gives each process before MPI_Init, that programs read to
// learn they run under MPI before they call it (Debian's h5py picks its MPI
// build by OMPI_COMM_WORLD_SIZE): OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/
// LOCAL_SIZE/NODE_RANK (Open MPI's NODE_RANK is the rank among the processes
// of this node, the local rank), OMPI_UNIVERSE_SIZE (the job's size: its
// slots are its ranks), OMPI_NUM_APP_CTX, OMPI_FIRST_RANKS and
// OMPI_APP_CTX_NUM_PROCS (one application).
void add_open_mpi_identity(EnvMap& env, const JobLayout& layout, int local_rank);

// --env-style mpi: add_open_mpi_identity(), and
// AZ_BATCH_MASTER_NODE=MASTER_ADDR:MASTER_PORT and AZ_BATCHAI_MPI_MASTER_NODE.
void add_mpi_env(EnvMap& env, const JobLayout& layout, int local_rank);

// What this node's host means for Open MPI's ranks, found before they start.
struct OpenMpiHost {
  // This node's job directory: made and removed by ddplaunch, on every end.
  std::string job_dir;
  // The ranks on this host (every node of the job there) outnumber the CPUs
  // they may use.
  bool oversubscribed = false;
  // Single-copy shared memory (Linux CMA, process_vm_readv) works between
  // this node's ranks (node/cma.hpp); `cma_why` says why, or why not.
  bool cma = false;
  std::string cma_why;
};

// What Open MPI needs when ddplaunch, not mpirun, starts it (docs/MPI.md):
// TCP on the interface the nodes reach each other by (Open MPI skips
// loopback by default); no single-copy shared memory where CMA does not
// work; its session files and its shared-memory files in this node's job
// directory (removed at the end, whatever the end; unique to the job); where
// the host's ranks outnumber its CPUs, ranks that yield the CPU while they
// wait (mpirun's rule). Each only where `env` (the user's, an outer
// launcher's identity removed) sets none of that parameter's family.
std::vector<std::pair<std::string, std::string>> open_mpi_defaults(const EnvMap& env,
                                                                   const JobLayout& layout,
                                                                   const OpenMpiHost& host);

// The variables by which an MPI library finds an outer launch step's process
// management (PMI-1/2's PMI_*, Slurm's PMIx plugin's SLURM_PMIX*): a worker of
// ddplaunch's must find only ddplaunch's PMIx server. (PMIX_* are replaced.)
bool is_outer_step_identity(const std::string& name);

}  // namespace ddplaunch
