#include "cluster/slurm.hpp"

#include <algorithm>
#include <charconv>

#include "cluster/nodelist.hpp"
#include "config/integer.hpp"

namespace ddplaunch {

namespace {

const std::string* find(const EnvMap& env, std::initializer_list<const char*> names,
                        const char** found = nullptr) {
  for (const char* n : names) {
    if (auto it = env.find(n); it != env.end() && !it->second.empty()) {
      if (found != nullptr) {
        *found = n;
      }
      return &it->second;
    }
  }
  return nullptr;
}

long long number_or(const std::string* s, long long fallback) {
  return s != nullptr ? parse_integer(*s).value_or(fallback) : fallback;
}

}  // namespace

Detection detect_slurm(const EnvMap& env) {
  Detection d;
  d.detector = "Slurm";
  const char* job_var = nullptr;
  const std::string* job = find(env, {"SLURM_JOB_ID", "SLURM_JOBID"}, &job_var);
  if (job == nullptr) {
    return d;
  }
  const char* list_var = nullptr;
  const std::string* step_list = find(env, {"SLURM_STEP_NODELIST"}, &list_var);
  const std::string* step_id = find(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  if (step_list == nullptr || step_id == nullptr) {
    // An sbatch/salloc script: the srun launcher may start every node.
    const long long nodes = number_or(find(env, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}), 1);
    d.allocation_nodes = static_cast<int>(std::clamp<long long>(nodes, 0, 1 << 20));
    return d;
  }
  std::vector<std::string> hosts;
  try {
    hosts = expand_nodelist(*step_list);
  } catch (const std::exception& e) {
    d.error = e.what();
    return d;
  }
  const char* nodes_var = "SLURM_STEP_NODELIST";
  const std::string* nodes_text = find(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}, &nodes_var);
  const long long nnodes = number_or(nodes_text, static_cast<long long>(hosts.size()));
  const long long node_id = number_or(find(env, {"SLURM_NODEID"}), 0);
  if (const std::string* tasks = find(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
    try {
      const auto per_node = expand_tasks_per_node(*tasks);
      const auto i = static_cast<size_t>(node_id);
      if (i < per_node.size() && per_node[i] > 1) {
        // Inside an allocation made with more tasks per node, srun inherits
        // its task count and ignores --ntasks-per-node=1 alone: -n, the
        // allocation's node count, makes it one task per node.
        const long long job_nodes =
            number_or(find(env, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}), nnodes);
        d.error = "srun started " + std::to_string(per_node[i]) +
                  " tasks on this node (SLURM_STEP_TASKS_PER_NODE=" + *tasks +
                  "), and each would start its own workers; run one task per node: srun -n " +
                  std::to_string(job_nodes) + " --ntasks-per-node=1 ddplaunch --nproc-per-node " +
                  std::to_string(per_node[i]) + " ...";
        return d;
      }
    } catch (const std::exception& e) {
      d.error = e.what();
      return d;
    }
  }
  d.values["nnodes"] = Setting{std::to_string(nnodes), nodes_var};
  d.values["node_rank"] = Setting{std::to_string(node_id), "SLURM_NODEID"};
  d.values["master_addr"] = Setting{hosts.front(), list_var};
  d.values["rdzv_id"] = Setting{"slurm-" + *job + "." + *step_id, job_var};
  // One port per job step, the same on every node; away from 29500 so that
  // two jobs sharing a node do not meet.
  const long long port = 20000 + (number_or(job, 0) * 7 + number_or(step_id, 0)) % 10000;
  d.values["master_port"] = Setting{std::to_string(port), job_var};
  // srun --mpi=pmix runs a PMIx server for the step: a channel Slurm
  // authenticates, through which node 0 hands every node a job token.
  d.token_via_pmix =
      find(env, {"PMIX_NAMESPACE"}) != nullptr && find(env, {"PMIX_RANK"}) != nullptr;
  return d;
}

}  // namespace ddplaunch
