// Detection: what one cluster detector found in the environment: option
// values, each with the variable it came from, and notes to tell the user.
// Detectors are pure functions of an EnvMap (cluster/pet.hpp is the first;
// Slurm, Open MPI and the platforms sit beside it). Plain values.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/options.hpp"

namespace ddplaunch {

struct Detection {
  std::string detector;            // "torchrun PET_*", "Slurm", "Open MPI"
  Settings values;                 // by option key; source = the variable's name
  std::vector<std::string> notes;  // said once at start-up
  // The environment is one ddplaunch cannot run in as it is (a usage error,
  // unless --nnodes was given on the command line).
  std::string error;
  // Options this environment needs from someone (a flag or another
  // detector): key -> the usage error when nobody gives one.
  std::map<std::string, std::string> needs;
  // Node 0's address is to be exchanged through the PMIx server that started
  // this process (mpirun), unless a flag or an earlier detector gives it.
  bool master_via_pmix = false;
  // A PMIx server started this process (srun --mpi=pmix): node 0 may hand
  // the job token to every node through it.
  bool token_via_pmix = false;
  // A scheduler's allocation of this many nodes that this process runs in,
  // outside any step of it (an sbatch script): the srun launcher can start
  // the job on all of them. 0: none.
  int allocation_nodes = 0;
};

}  // namespace ddplaunch
