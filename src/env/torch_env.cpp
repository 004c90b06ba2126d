#include "env/torch_env.hpp"

namespace ddplaunch {

bool sets_omp_num_threads(const EnvMap& base, const JobLayout& layout) {
  return layout.local_world_size > 1 && !base.contains("OMP_NUM_THREADS");
}

EnvMap build_torch_env(const EnvMap& base, const JobLayout& layout, int local_rank) {
  EnvMap env = base;
  env.erase("DDPLAUNCH_RDZV_TOKEN");  // the launcher's secret, not the workers'
  const int rank = layout.rank_offset + local_rank;
  auto put = [&env](const char* name, const std::string& value) { env[name] = value; };
  auto num = [](int v) { return std::to_string(v); };

  put("RANK", num(rank));
  put("LOCAL_RANK", num(local_rank));
  put("WORLD_SIZE", num(layout.world_size));
  put("LOCAL_WORLD_SIZE", num(layout.local_world_size));
  put("NODE_RANK", num(layout.node_rank));
  put("GROUP_RANK", num(layout.node_rank));
  put("GROUP_WORLD_SIZE", num(layout.nnodes));
  put("ROLE_RANK", num(rank));
  put("ROLE_WORLD_SIZE", num(layout.world_size));
  put("ROLE_NAME", layout.role);
  put("MASTER_ADDR", layout.master_addr);
  put("MASTER_PORT", num(layout.master_port));
  put("TORCHELASTIC_RUN_ID", layout.run_id);
  put("TORCHELASTIC_RESTART_COUNT", num(layout.restart_count));
  put("TORCHELASTIC_MAX_RESTARTS", num(layout.max_restarts));
  put("TORCHELASTIC_USE_AGENT_STORE", "False");
  if (sets_omp_num_threads(base, layout)) {
    put("OMP_NUM_THREADS", "1");
  }
  if (!layout.socket_ifname.empty()) {
    env.try_emplace("GLOO_SOCKET_IFNAME", layout.socket_ifname);
    env.try_emplace("NCCL_SOCKET_IFNAME", layout.socket_ifname);
  }
  env.try_emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  env.try_emplace("NCCL_ASYNC_ERROR_HANDLING", "1");
  return env;
}

}  // namespace ddplaunch
