#include "env/scheduler_env.hpp"

#include <iterator>

namespace ddplaunch {

bool is_outer_mpi_identity(const std::string& name) {
  static const char* const k_prefixes[] = {"PMIX_",         "PRTE_",         "OMPI_COMM_WORLD_",
                                           "OMPI_APP_CTX_", "OMPI_MCA_ess_", "OMPI_MCA_orte_",
                                           "OMPI_MCA_prte_"};
  static const char* const k_names[] = {"OMPI_UNIVERSE_SIZE", "OMPI_FIRST_RANKS", "OMPI_ARGV",
                                        "OMPI_COMMAND", "OMPI_NUM_APP_CTX", "OMPI_FILE_LOCATION",
                                        "OMPI_MCA_initial_wdir",
                                        // mpirun's choice of PMIx component; a user's own
                                        // OMPI_MCA_pmix_base_* settings stay.
                                        "OMPI_MCA_pmix"};
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
