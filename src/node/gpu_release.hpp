// Before a new round: waiting until the last round's processes no longer
// hold GPU memory (the driver frees a dead process's memory after it has
// gone, not at once). Which pids hold a GPU comes from a GpuHolders
// function: NVML's compute processes on this node's GPUs, or a fake in the
// tests. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/env_map.hpp"

namespace ddplaunch {

// Every pid holding a compute context on this node's GPUs; nullopt when
// that cannot be told (the wait then ends: nothing is known to be held).
using GpuHolders = std::function<std::optional<std::vector<pid_t>>()>;

inline constexpr auto k_gpu_release_poll = std::chrono::milliseconds(50);

// Asks `holders` until none of `pids` is among them (nullopt), or until
// `deadline`: then the first of `pids` still holding a GPU. `sleep_until`
// waits between asks (the Driver's wait, so that signals still end it);
// `now` is the clock both use.
std::optional<pid_t> wait_gpu_release(
    const GpuHolders& holders, const std::vector<pid_t>& pids,
    std::chrono::steady_clock::time_point deadline,
    const std::function<void(std::chrono::steady_clock::time_point)>& sleep_until,
    const std::function<std::chrono::steady_clock::time_point()>& now);

// GpuHolders over NVML, for the GPUs `env` makes visible
// (CUDA_VISIBLE_DEVICES, else all), with one NVML session kept for the
// function's life (nvmlInit can take a while on a node without persistence
// mode). An empty function, with `why` set, where NVML is absent.
GpuHolders nvml_gpu_holders(const EnvMap& env, std::string& why);

// Each process's GPU memory (bytes, over the GPUs `env` makes visible), for
// `ddplaunch status` and --metrics-port; nullopt when NVML cannot say.
using GpuMemory = std::function<std::optional<std::unordered_map<pid_t, unsigned long long>>()>;
// GpuMemory over NVML, with one session kept for the function's life; an
// empty function, with `why` set, where NVML is absent.
GpuMemory nvml_gpu_memory(const EnvMap& env, std::string& why);

}  // namespace ddplaunch
