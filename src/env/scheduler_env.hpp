// Workers never inherit the launcher's own scheduler identity. Under srun the
// launcher is one Slurm task per node, so SLURM_PROCID, SLURM_LOCALID,
// SLURM_NODEID, SLURM_NTASKS, SLURM_STEP_NUM_TASKS, SLURM_NTASKS_PER_NODE,
// SLURM_TASKS_PER_NODE and SLURM_STEP_TASKS_PER_NODE are rewritten to agree
// with RANK, LOCAL_RANK, NODE_RANK and WORLD_SIZE (one task per worker, as
// srun would give; code that reads SLURM_*, Lightning's included, then sees
// the right rank). Under mpirun the launcher is one MPI process per node, so
// the outer job's identity (PMIX_*, PRTE_*, OMPI_COMM_WORLD_*, and the
// OMPI_MCA_* parameters mpirun sets for its own job: its daemon's address,
// its job id, its session directories) is removed: MPI_Init in a worker does
// not try to join the outer job. Every other OMPI_MCA_* is the user's
// setting and stays, orte_* ones included. Pure.
#pragma once

#include "config/env_map.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// Applies both rules to one local rank's environment.
void rewrite_scheduler_identity(EnvMap& env, const JobLayout& layout, int local_rank);
// The two rules apart, so that the first runs once for every worker of a
// node: it removes an outer launcher's MPI identity ...
void strip_outer_mpi_identity(EnvMap& env);
// ... and the second gives the rank its own Slurm task identity (when there
// is a Slurm job).
void rewrite_slurm_identity(EnvMap& env, const JobLayout& layout, int local_rank);

// True for a variable that is part of an outer mpirun's identity, whatever
// its value (OMPI_MCA_orte_tmpdir_base, which mpirun sets to the user's value
// or its default, is told apart by strip_outer_mpi_identity).
bool is_outer_mpi_identity(const std::string& name);

// Slurm's compressed per-node counts: runs {2 x2, 1 x1} -> "2(x2),1".
std::string slurm_counts(const std::vector<SizeRun>& sizes);

}  // namespace ddplaunch
