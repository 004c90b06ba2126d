// This node's resources: GPUs and CPUs, and the host name. The parsing
// functions are pure; probe_resources() and local_hostname() read the system.
// Nothing here is stateful; all of it is thread-compatible.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "env/env_map.hpp"

namespace ddplaunch {

// How many devices a CUDA_VISIBLE_DEVICES value names, following CUDA's rule
// that the list ends at the first invalid entry ("0,1,-1,2" names 2).
// "" names none. Entries are indices, or GPU-/MIG- UUIDs.
int count_visible_devices(std::string_view value);

// What a node offers to --nproc-per-node auto|cpu|gpu.
struct NodeResources {
  std::optional<int> visible_gpus;  // from CUDA_VISIBLE_DEVICES when it is set
  int driver_gpus = 0;              // devices the NVIDIA driver lists
  int cpus = 1;                     // online CPUs
};

// Reads CUDA_VISIBLE_DEVICES from `env`, /proc/driver/nvidia/gpus and the CPU count.
NodeResources probe_resources(const EnvMap& env);

// Turns --nproc-per-node into a number. Throws UsageError for `gpu` when the
// node has no usable GPU.
int resolve_nproc(NprocMode mode, int fixed, const NodeResources& resources);

// gethostname(), or "localhost" if it fails.
std::string local_hostname();

}  // namespace ddplaunch
