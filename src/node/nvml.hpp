// NVML (libnvidia-ml.so.1), loaded at run time: the few calls of its stable
// C ABI that the health check and the restart's GPU wait use. A session
// initialises NVML and shuts it down when destroyed. Not thread-safe; one
// session at a time.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/env_map.hpp"

namespace ddplaunch {

class NvmlSession {
 public:
  // nullptr, with `why` set, where NVML cannot be loaded or will not start
  // (no NVIDIA driver): callers skip what they would have checked.
  static std::unique_ptr<NvmlSession> open(std::string& why);
  ~NvmlSession();
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;

  // The GPUs this node may use: CUDA_VISIBLE_DEVICES's entries (indices or
  // UUIDs), else every GPU NVML counts.
  std::vector<std::string> visible(const EnvMap& env) const;
  // Whether GPU `id` answers (its memory information); `error` says why not.
  bool responds(const std::string& id, std::string& error) const;
  // The processes holding a compute context on GPU `id` (host pids, as the
  // driver sees them); nullopt when NVML cannot say.
  std::optional<std::vector<pid_t>> compute_processes(const std::string& id) const;
  // The same, each with the GPU memory it uses there (bytes; 0 where the
  // driver does not say, as in a container without the host's pid view).
  struct GpuProcess {
    pid_t pid = 0;
    unsigned long long used_bytes = 0;
  };
  std::optional<std::vector<GpuProcess>> compute_usage(const std::string& id) const;

  struct Api;

 private:
  explicit NvmlSession(const Api& api) : m_api(api) {}
  void* device(const std::string& id, int& rc) const;
  const Api& m_api;
};

}  // namespace ddplaunch
