#include "env/scheduler_env.hpp"

#include <iterator>

namespace ddplaunch {

bool is_outer_mpi_identity(const std::string& name) {
  static const char* const k_prefixes[] = {"PMIX_",
                                           "PRTE_",
                                           "OMPI_COMM_WORLD_",
                                           "OMPI_APP_CTX_",
                                           "OMPI_MCA_prte_",
                                           "OMPI_MCA_ess_base_",
                                           "OMPI_MCA_orte_ess_"};
  // What Open MPI 4's mpirun (orted) sets for the job it starts: none of it
  // is a user's setting (a user's own, such as orte_base_help_aggregate,
  // stays).
  static const char* const k_names[] = {
      "OMPI_UNIVERSE_SIZE", "OMPI_FIRST_RANKS", "OMPI_ARGV", "OMPI_COMMAND", "OMPI_NUM_APP_CTX",
      "OMPI_FILE_LOCATION", "OMPI_MCA_initial_wdir",
      // mpirun's choice of PMIx and ess components; a user's own
      // OMPI_MCA_pmix_base_* settings stay.
      "OMPI_MCA_pmix", "OMPI_MCA_ess", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_orte_local_daemon_uri",
      "OMPI_MCA_orte_precondition_transports", "OMPI_MCA_orte_app_num", "OMPI_MCA_orte_num_nodes",
      "OMPI_MCA_orte_bound_at_launch", "OMPI_MCA_orte_launch", "OMPI_MCA_orte_top_session_dir",
      "OMPI_MCA_orte_jobfam_session_dir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint",
      // mpirun's verdict on its own job's slots; ddplaunch decides for its
      // own (env/mpi_env.hpp).
      "OMPI_MCA_mpi_oversubscribe"};
  for (const char* p : k_prefixes) {
    if (name.starts_with(p)) {
      return true;
    }
  }
  for (const char* n : k_names) {
    if (name == n) {
      return true;
    }
  }
  return false;
}

std::string slurm_counts(const std::vector<SizeRun>& sizes) {
  std::vector<SizeRun> merged;
  for (const auto& run : sizes) {
    if (!merged.empty() && merged.back().nproc == run.nproc) {
      merged.back().count += run.count;
    } else {
      merged.push_back(run);
    }
  }
  std::string out;
  for (const auto& run : merged) {
    out += (out.empty() ? "" : ",") + std::to_string(run.nproc);
    if (run.count > 1) {
      out += "(x" + std::to_string(run.count) + ")";
    }
  }
  return out;
}

void strip_outer_mpi_identity(EnvMap& env) {
  // mpirun passes its session directory's base on whether or not the user
  // chose it: its default (TMPDIR, else /tmp) is mpirun's, anything else the
  // user's.
  if (env.contains("OMPI_MCA_orte_hnp_uri") || env.contains("OMPI_MCA_orte_local_daemon_uri")) {
    auto tmpdir = env.find("TMPDIR");
    const std::string default_base =
        tmpdir != env.end() && !tmpdir->second.empty() ? tmpdir->second : "/tmp";
    if (auto base = env.find("OMPI_MCA_orte_tmpdir_base");
        base != env.end() && base->second == default_base) {
      env.erase(base);
    }
  }
  for (auto it = env.begin(); it != env.end();) {
    it = is_outer_mpi_identity(it->first) ? env.erase(it) : std::next(it);
  }
}

void rewrite_scheduler_identity(EnvMap& env, const JobLayout& layout, int local_rank) {
  strip_outer_mpi_identity(env);
  rewrite_slurm_identity(env, layout, local_rank);
}

void rewrite_slurm_identity(EnvMap& env, const JobLayout& layout, int local_rank) {
  if (!env.contains("SLURM_JOB_ID") && !env.contains("SLURM_JOBID")) {
    return;
  }
  const std::string tasks =
      slurm_counts(layout.node_sizes.empty() ? std::vector<SizeRun>{{layout.local_world_size, 1}}
                                             : layout.node_sizes);
  env["SLURM_PROCID"] = std::to_string(layout.rank_offset + local_rank);
  env["SLURM_LOCALID"] = std::to_string(local_rank);
  env["SLURM_NODEID"] = std::to_string(layout.node_rank);
  env["SLURM_NTASKS"] = std::to_string(layout.world_size);
  env["SLURM_STEP_NUM_TASKS"] = std::to_string(layout.world_size);
  env["SLURM_NTASKS_PER_NODE"] = std::to_string(layout.local_world_size);
  env["SLURM_TASKS_PER_NODE"] = tasks;
  env["SLURM_STEP_TASKS_PER_NODE"] = tasks;
}

}  // namespace ddplaunch
