#include "node/resources.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <iterator>
#include <set>
#include <system_error>

#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "posix/fd.hpp"

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
  return static_cast<int>(visible_devices(value).size());
}

std::vector<std::string> visible_devices(std::string_view value) {
  std::vector<std::string> out;
  while (!value.empty()) {
    auto comma = value.find(',');
    std::string_view entry = value.substr(0, comma);
    if (!valid_device_entry(entry)) {
      break;
    }
    while (std::isspace(static_cast<unsigned char>(entry.front()))) {
      entry.remove_prefix(1);
    }
    while (std::isspace(static_cast<unsigned char>(entry.back()))) {
      entry.remove_suffix(1);
    }
    out.emplace_back(entry);
    if (comma == std::string_view::npos) {
      break;
    }
    value.remove_prefix(comma + 1);
  }
  return out;
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  std::set<int> cpus;
  auto number = [](std::string_view t) -> std::optional<int> {
    const auto v = parse_integer_in(t, 0, 1 << 20);
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  };
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const auto dash = item.find('-');
    auto lo = number(item.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : number(item.substr(dash + 1));
    if (!lo || !hi || *hi < *lo) {
      return std::nullopt;
    }
    for (int c = *lo; c <= *hi; ++c) {
      cpus.insert(c);
    }
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  return format_ranges(cpus);
}

namespace {

// The first line of a small sysfs file; empty when it cannot be read.
std::string first_line(const std::filesystem::path& path) {
  std::string text = posix::read_small_file(path.string(), 4096).value_or("");
  return text.substr(0, text.find('\n'));
}

int count_intel_gpus() {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/sys/class/drm", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("card") || name.find('-') != std::string::npos) {
      continue;  // card0-HDMI-A-1 and the like are connectors
    }
    const std::string vendor = first_line(it->path() / "device" / "vendor");
    const std::string cls = first_line(it->path() / "device" / "class");
    if (vendor == "0x8086" && cls.starts_with("0x03")) {
      ++n;
    }
  }
  return n;
}

std::vector<std::vector<int>> numa_nodes(const std::vector<int>& allowed) {
  std::vector<std::vector<int>> out;
  std::error_code ec;
  std::vector<std::filesystem::path> nodes;
  for (auto it = std::filesystem::directory_iterator("/sys/devices/system/node", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("node") && name.size() > 4 &&
        std::isdigit(static_cast<unsigned char>(name[4]))) {
      nodes.push_back(it->path());
    }
  }
  auto number = [](const std::filesystem::path& p) {
    return parse_integer(p.filename().string().substr(4)).value_or(-1);
  };
  std::sort(nodes.begin(), nodes.end(),
            [&](const auto& a, const auto& b) { return number(a) < number(b); });
  const std::set<int> ok(allowed.begin(), allowed.end());
  for (const auto& node : nodes) {
    auto cpus = parse_cpu_list(first_line(node / "cpulist"));
    if (!cpus) {
      continue;
    }
    std::vector<int> mine;
    std::copy_if(cpus->begin(), cpus->end(), std::back_inserter(mine),
                 [&ok](int c) { return ok.contains(c); });
    if (!mine.empty()) {
      out.push_back(std::move(mine));
    }
  }
  return out;
}

}  // namespace

NodeResources probe_resources(const EnvMap& env, ResourceProbes probes) {
  NodeResources r;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++r.driver_gpus;
  }
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
    r.gpu_ids = visible_devices(it->second);
    r.visible_gpus = static_cast<int>(r.gpu_ids.size());
    r.gpu_source = "CUDA_VISIBLE_DEVICES";
  } else {
    for (const char* grant : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
      if (auto g = env.find(grant); g != env.end() && !g->second.empty()) {
        r.gpu_ids = visible_devices(g->second);
        r.visible_gpus = static_cast<int>(r.gpu_ids.size());
        r.gpu_source = grant;
        break;
      }
    }
    if (r.gpu_source.empty()) {
      for (int i = 0; i < r.driver_gpus; ++i) {
        r.gpu_ids.push_back(std::to_string(i));
      }
      r.gpu_source = "the NVIDIA driver";
    }
  }
  r.xpus = probes.intel_gpus ? count_intel_gpus() : 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  r.cpus = cpus > 0 ? static_cast<int>(cpus) : 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) {
        r.allowed_cpus.push_back(c);
      }
    }
  }
  if (probes.numa) {
    r.numa_cpus = numa_nodes(r.allowed_cpus);
  }
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
    case NprocMode::k_xpu:
      if (resources.xpus == 0) {
        throw UsageError(
            "--nproc-per-node xpu: no Intel GPU found on this node (/sys/class/drm lists none "
            "from vendor 0x8086); give a number, 'cpu' or 'auto'");
      }
      return resources.xpus;
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
