// This node's resources: GPUs and CPUs, and the host name. The parsing
// functions are pure; probe_resources() and local_hostname() read the system.
// Nothing here is stateful; all of it is thread-compatible.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

// How many devices a CUDA_VISIBLE_DEVICES value names, following CUDA's rule
// that the list ends at the first invalid entry ("0,1,-1,2" names 2).
// "" names none. Entries are indices, or GPU-/MIG- UUIDs.
int count_visible_devices(std::string_view value);
// The entries themselves, trimmed, up to the first invalid one.
std::vector<std::string> visible_devices(std::string_view value);

// A Linux CPU list ("0-3,8,10-11", as /sys and Cpus_allowed_list write it).
// nullopt when malformed.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);
// The other way: ascending CPUs as "0-3,8".
std::string format_cpu_list(const std::vector<int>& cpus);

// What a node offers to --nproc-per-node auto|cpu|gpu|xpu and to binding.
struct NodeResources {
  std::optional<int> visible_gpus;  // from CUDA_VISIBLE_DEVICES when it is set
  int driver_gpus = 0;              // devices the NVIDIA driver lists
  int xpus = 0;                     // Intel GPUs (/sys/class/drm, vendor 0x8086)
  int cpus = 1;                     // online CPUs
  // The GPUs this node may use, as CUDA_VISIBLE_DEVICES entries: its own
  // list when set, else Slurm's grant (SLURM_STEP_GPUS, SLURM_JOB_GPUS), else
  // the driver's indices. `gpu_source` names where they came from.
  std::vector<std::string> gpu_ids;
  std::string gpu_source;
  std::vector<int> allowed_cpus;            // sched_getaffinity, ascending
  std::vector<std::vector<int>> numa_cpus;  // allowed CPUs of each NUMA node that has any
};

// What probe_resources() reads beyond the GPUs, CPUs and affinity, which it
// always reads: each costs a launch a directory walk in /sys.
struct ResourceProbes {
  bool intel_gpus = false;  // xpus: for --nproc-per-node xpu
  bool numa = false;        // numa_cpus: for --cpu-bind numa
};

// Reads CUDA_VISIBLE_DEVICES and Slurm's grant from `env`,
// /proc/driver/nvidia/gpus, the online CPUs and the affinity; and, where
// `probes` asks, /sys/class/drm and the NUMA nodes (left empty otherwise).
NodeResources probe_resources(const EnvMap& env, ResourceProbes probes);

// Turns --nproc-per-node into a number. Throws UsageError for `gpu` when the
// node has no usable GPU.
int resolve_nproc(NprocMode mode, int fixed, const NodeResources& resources);

// gethostname(), or "localhost" if it fails.
std::string local_hostname();

}  // namespace ddplaunch
