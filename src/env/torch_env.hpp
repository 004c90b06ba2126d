// The torch style of worker environment: what torchrun gives each worker.
// Pure functions: they take the inherited environment and the job's layout
// and return a new map; the launcher never calls setenv() to pass values to
// workers.
#pragma once

#include <string>

#include "config/env_map.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...) for
// one local rank, layered over `base`. OMP_NUM_THREADS=1 is added when unset
// and the node runs more than one worker; the NCCL error-handling switches
// are added when unset. Everything else in `base` is kept.
EnvMap build_torch_env(const EnvMap& base, const JobLayout& layout, int local_rank);

// True when build_torch_env() sets OMP_NUM_THREADS for this layout.
bool sets_omp_num_threads(const EnvMap& base, const JobLayout& layout);

}  // namespace ddplaunch
