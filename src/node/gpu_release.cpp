#include "node/gpu_release.hpp"

#include <algorithm>
#include <memory>

#include "node/nvml.hpp"

namespace ddplaunch {

std::optional<pid_t> wait_gpu_release(
    const GpuHolders& holders, const std::vector<pid_t>& pids,
    std::chrono::steady_clock::time_point deadline,
    const std::function<void(std::chrono::steady_clock::time_point)>& sleep_until,
    const std::function<std::chrono::steady_clock::time_point()>& now) {
  while (true) {
    const auto held = holders();
    if (!held) {
      return std::nullopt;
    }
    const auto still = std::find_if(pids.begin(), pids.end(), [&held](pid_t pid) {
      return pid > 0 && std::find(held->begin(), held->end(), pid) != held->end();
    });
    if (still == pids.end()) {
      return std::nullopt;
    }
    const auto at = now();
    if (at >= deadline) {
      return *still;
    }
    sleep_until(std::min(deadline, at + k_gpu_release_poll));
  }
}

GpuHolders nvml_gpu_holders(const EnvMap& env, std::string& why) {
  std::shared_ptr<NvmlSession> session = NvmlSession::open(why);
  if (!session) {
    return {};
  }
  const std::vector<std::string> ids = session->visible(env);
  return [session, ids]() -> std::optional<std::vector<pid_t>> {
    std::vector<pid_t> all;
    for (const auto& id : ids) {
      const auto pids = session->compute_processes(id);
      if (!pids) {
        return std::nullopt;
      }
      all.insert(all.end(), pids->begin(), pids->end());
    }
    return all;
  };
}

GpuMemory nvml_gpu_memory(const EnvMap& env, std::string& why) {
  std::shared_ptr<NvmlSession> session = NvmlSession::open(why);
  if (!session) {
    return {};
  }
  const std::vector<std::string> ids = session->visible(env);
  return [session, ids]() -> std::optional<std::unordered_map<pid_t, unsigned long long>> {
    std::unordered_map<pid_t, unsigned long long> bytes;
    for (const auto& id : ids) {
      const auto usage = session->compute_usage(id);
      if (!usage) {
        return std::nullopt;
      }
      for (const auto& p : *usage) {
        bytes[p.pid] += p.used_bytes;
      }
    }
    return bytes;
  };
}

}  // namespace ddplaunch
