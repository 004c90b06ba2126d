#include "env/mpi_env.hpp"

namespace ddplaunch {

void add_mpi_env(EnvMap& env, const JobLayout& layout, int local_rank) {
  env["OMPI_COMM_WORLD_RANK"] = std::to_string(layout.rank_offset + local_rank);
  env["OMPI_COMM_WORLD_SIZE"] = std::to_string(layout.world_size);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = std::to_string(local_rank);
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = std::to_string(layout.local_world_size);
  env["OMPI_COMM_WORLD_NODE_RANK"] = std::to_string(local_rank);
  env["AZ_BATCH_MASTER_NODE"] = layout.master_addr + ":" + std::to_string(layout.master_port);
  env["AZ_BATCHAI_MPI_MASTER_NODE"] = layout.master_addr;
}

}  // namespace ddplaunch
