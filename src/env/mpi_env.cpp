#include "env/mpi_env.hpp"

namespace ddplaunch {

void add_open_mpi_identity(EnvMap& env, const JobLayout& layout, int local_rank) {
  env["OMPI_COMM_WORLD_RANK"] = std::to_string(layout.rank_offset + local_rank);
  env["OMPI_COMM_WORLD_SIZE"] = std::to_string(layout.world_size);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = std::to_string(local_rank);
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = std::to_string(layout.local_world_size);
  env["OMPI_COMM_WORLD_NODE_RANK"] = std::to_string(local_rank);
  env["OMPI_UNIVERSE_SIZE"] = std::to_string(layout.world_size);
  env["OMPI_NUM_APP_CTX"] = "1";
  env["OMPI_FIRST_RANKS"] = "0";
  env["OMPI_APP_CTX_NUM_PROCS"] = std::to_string(layout.world_size);
}

void add_mpi_env(EnvMap& env, const JobLayout& layout, int local_rank) {
  add_open_mpi_identity(env, layout, local_rank);
  env["AZ_BATCH_MASTER_NODE"] = layout.master_addr + ":" + std::to_string(layout.master_port);
  env["AZ_BATCHAI_MPI_MASTER_NODE"] = layout.master_addr;
}

}  // namespace ddplaunch

namespace ddplaunch {

std::vector<std::pair<std::string, std::string>> open_mpi_defaults(const EnvMap& env,
                                                                   const JobLayout& layout,
                                                                   const OpenMpiHost& host) {
  std::vector<std::pair<std::string, std::string>> out;
  auto set = [&env, &out](std::initializer_list<const char*> family, const char* name,
                          const std::string& value) {
    for (const char* f : family) {
      if (env.contains(f)) {
        return;
      }
    }
    if (!value.empty()) {
      out.emplace_back(name, value);
    }
  };
  set({"OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_btl_tcp_if_exclude"}, "OMPI_MCA_btl_tcp_if_include",
      layout.socket_ifname);
  if (!host.cma) {
    set({"OMPI_MCA_btl_vader_single_copy_mechanism"}, "OMPI_MCA_btl_vader_single_copy_mechanism",
        "none");
  }
  set({"OMPI_MCA_orte_tmpdir_base"}, "OMPI_MCA_orte_tmpdir_base", host.job_dir);
  // Its shared-memory segments (vader_segment.*, 4 MiB a rank) beside them:
  // in /dev/shm they would outlive a rank killed or aborted, and two jobs'
  // names could meet.
  set({"OMPI_MCA_btl_vader_backing_directory"}, "OMPI_MCA_btl_vader_backing_directory",
      host.job_dir);
  if (host.oversubscribed) {
    // mpirun's rule for more ranks than slots: a rank that waits gives its
    // CPU to one that works, instead of spinning for its whole time slice.
    set({"OMPI_MCA_mpi_yield_when_idle"}, "OMPI_MCA_mpi_yield_when_idle", "1");
  }
  // Open MPI 4 decides how it was started by its "schizo" components: with
  // only its own, neither "a singleton" (no mpirun daemon) nor "srun's task"
  // (SLURM_STEP_ID) is declared, and it takes the PMIx server it is given.
  set({"OMPI_MCA_schizo"}, "OMPI_MCA_schizo", "ompi");
  return out;
}

bool is_outer_step_identity(const std::string& name) {
  return name.starts_with("SLURM_PMIX") || name.starts_with("PMI_");
}

}  // namespace ddplaunch
