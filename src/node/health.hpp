// The built-in health checks of `ddplaunch check` (and `--health-check
// builtin`): is this node fit to join a job? Each looks at this node only
// and says what it found in one line. I/O: files, /proc, NVML (dlopen).
// Not thread-safe (NVML is initialised and shut down per call).
#pragma once

#include <string>
#include <vector>

#include "config/env_map.hpp"

namespace ddplaunch {

struct CheckResult {
  enum class State { k_ok, k_skipped, k_failed };
  std::string name;  // "disk", "gpu", "strays"
  State state = State::k_ok;
  std::string detail;  // what was found, or why it failed or was skipped
};

// Each of `dirs` (the working directory, the log directory) can take a new
// file. A directory that does not exist yet is checked at its nearest
// existing parent (ddplaunch creates it).
CheckResult check_disk(const std::vector<std::string>& dirs);

// The GPUs in CUDA_VISIBLE_DEVICES (indices or UUIDs; unset: every one)
// answer NVML (libnvidia-ml.so.1, loaded at run time). Skipped without NVML
// or without an NVIDIA driver.
CheckResult check_gpus(const EnvMap& env);

// No process of this user but this one and its ancestors holds an NVIDIA GPU
// (/dev/nvidiaN open), and nobody listens on any of `ports` (the job's).
CheckResult check_strays(const std::vector<int>& ports);

}  // namespace ddplaunch
