// Builders for the environment each worker receives. Pure functions: they
// take the inherited environment and the job's layout and return a new map;
// the launcher never calls setenv() to pass values to workers.
#pragma once

#include <string>

#include "ddplaunch/env_detect.hpp"

namespace ddplaunch {

// Where this node's workers sit in the whole job, as rendezvous decided it.
struct JobLayout {
  int node_rank = 0;
  int nnodes = 1;
  int local_world_size = 1;  // workers on this node
  int world_size = 1;        // workers on every node
  int rank_offset = 0;       // global rank of this node's local rank 0
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;   // the workers' MASTER_PORT (not the store's port)
  std::string run_id = "none";
  std::string role = "default";
  int restart_count = 0;
  int max_restarts = 0;
  std::string hostname;
};

// torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...) for
// one local rank, layered over `base`. OMP_NUM_THREADS=1 is added when unset
// and the node runs more than one worker; the NCCL error-handling switches
// are added when unset. Everything else in `base` is kept.
EnvMap build_torch_env(const EnvMap& base, const JobLayout& layout, int local_rank);

// True when build_torch_env() sets OMP_NUM_THREADS for this layout.
bool sets_omp_num_threads(const EnvMap& base, const JobLayout& layout);

}  // namespace ddplaunch
