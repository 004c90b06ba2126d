// The mpi style of worker environment (--env-style mpi): the variables Open
// MPI gives each process, so that frameworks that find their rank that way
// (Horovod's and DeepSpeed's launch-free modes, Azure ML's documented
// Lightning and DeepSpeed set-ups) agree with RANK. They let a framework find
// its rank; they do not make MPI_Init join one job. Pure.
#pragma once

#include "config/env_map.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/NODE_RANK (Open MPI's
// NODE_RANK is the rank among the processes of this node, the local rank),
// AZ_BATCH_MASTER_NODE=MASTER_ADDR:MASTER_PORT and AZ_BATCHAI_MPI_MASTER_NODE.
void add_mpi_env(EnvMap& env, const JobLayout& layout, int local_rank);

}  // namespace ddplaunch
