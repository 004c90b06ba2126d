#include "node/resources.hpp"

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <system_error>

#include "ddplaunch/error.hpp"

namespace ddplaunch {

namespace {

bool valid_device_entry(std::string_view entry) {
  while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.front()))) {
    entry.remove_prefix(1);
  }
  while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.back()))) {
    entry.remove_suffix(1);
  }
  if (entry.empty()) {
    return false;
  }
  if (entry.starts_with("GPU-") || entry.starts_with("MIG-")) {
    return entry.size() > 4;
  }
  for (char c : entry) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return false;  // "-1", "NoDevFiles", garbage: CUDA stops here
    }
  }
  return true;
}

}  // namespace

int count_visible_devices(std::string_view value) {
  int count = 0;
  while (!value.empty()) {
    auto comma = value.find(',');
    std::string_view entry = value.substr(0, comma);
    if (!valid_device_entry(entry)) {
      break;
    }
    ++count;
    if (comma == std::string_view::npos) {
      break;
    }
    value.remove_prefix(comma + 1);
  }
  return count;
}

NodeResources probe_resources(const EnvMap& env) {
  NodeResources r;
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
    r.visible_gpus = count_visible_devices(it->second);
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++r.driver_gpus;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  r.cpus = cpus > 0 ? static_cast<int>(cpus) : 1;
  return r;
}

int resolve_nproc(NprocMode mode, int fixed, const NodeResources& resources) {
  int gpus = resources.visible_gpus.value_or(resources.driver_gpus);
  switch (mode) {
    case NprocMode::k_fixed:
      return fixed;
    case NprocMode::k_cpu:
      return resources.cpus;
    case NprocMode::k_auto:
      return gpus > 0 ? gpus : resources.cpus;
    case NprocMode::k_gpu:
      if (gpus == 0) {
        if (resources.visible_gpus) {
          throw UsageError(
              "--nproc-per-node gpu: CUDA_VISIBLE_DEVICES names no usable GPU; "
              "set it to the GPUs to use, or give a number, 'cpu' or 'auto'");
        }
        throw UsageError(
            "--nproc-per-node gpu: no NVIDIA GPU found on this node "
            "(/proc/driver/nvidia/gpus is empty or missing); give a number, 'cpu' or 'auto'");
      }
      return gpus;
  }
  return fixed;
}

std::string local_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') {
    return "localhost";
  }
  return buf;
}

}  // namespace ddplaunch
