#include "mpi/topology_cache.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "posix/cache_file.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

namespace {

constexpr std::string_view k_topology_magic = "ddplaunch-topology 1 ";
constexpr size_t k_max_topology_bytes = 64u << 20;  // hwloc's XML of a large machine: ~1 MiB

// The entries of a directory, sorted, space-separated ("" when it is absent);
// with `only_with`, only the entries that hold that name.
std::string directory_names(const std::string& path, const char* only_with = nullptr) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.' &&
          (only_with == nullptr ||
           ::access((path + "/" + entry->d_name + "/" + only_with).c_str(), F_OK) == 0)) {
        names.emplace_back(entry->d_name);
      }
    }
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& name : names) {
    out += out.empty() ? "" : " ";
    out += name;
  }
  return out;
}

// A line's value in /proc/self/status ("Cpus_allowed_list:\t0-3" gives "0-3").
std::string status_field(const std::string& status, std::string_view name) {
  size_t at = 0;
  while (at < status.size()) {
    const size_t end = std::min(status.find('\n', at), status.size());
    const std::string_view line(status.data() + at, end - at);
    if (line.size() > name.size() && line.substr(0, name.size()) == name &&
        line[name.size()] == ':') {
      const size_t value = line.find_first_not_of(" \t", name.size() + 1);
      return value == std::string_view::npos ? "" : std::string(line.substr(value));
    }
    at = end + 1;
  }
  return "";
}

std::string first_line(const std::string& path) {
  std::string text = posix::read_small_file(path, 4096).value_or("");
  text.resize(std::min(text.find('\n'), text.size()));
  return text;
}

}  // namespace

std::string topology_fingerprint(unsigned hwloc_version, const std::string& proc_root,
                                 const std::string& sys_root) {
  const std::string status = posix::read_small_file(proc_root + "/self/status").value_or("");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string key = "hwloc=" + std::to_string(hwloc_version);
  key += ";boot=" + first_line(proc_root + "/sys/kernel/random/boot_id");
  key += ";host=" + std::string(host);
  key += ";cpus=" + status_field(status, "Cpus_allowed_list");
  key += ";mems=" + status_field(status, "Mems_allowed_list");
  key += ";online=" + first_line(sys_root + "/devices/system/cpu/online");
  key += ";pci=" + directory_names(sys_root + "/bus/pci/devices");
  // The network interfaces of a device (a PCI NIC's "eth0"): hwloc shows
  // those, not virtual ones (lo, a container's veth, a bridge), which come
  // and go without changing the topology.
  key += ";net=" + directory_names(sys_root + "/class/net", "device");
  std::replace(key.begin(), key.end(), '\n', ' ');
  return key;
}

std::string topology_cache_path() {
  return posix::temp_dir() + "/ddplaunch-topology-" + std::to_string(::geteuid()) + ".xml";
}

bool topology_cache_enabled(const EnvMap& env) {
  const auto it = env.find("DDPLAUNCH_TOPOLOGY_CACHE");
  if (it != env.end() && (it->second == "0" || it->second == "off" || it->second == "no")) {
    return false;
  }
  for (const char* steering :
       {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_FSROOT", "HWLOC_COMPONENTS",
        "HWLOC_PLUGINS_PATH", "HWLOC_PLUGINS_BLACKLIST", "HWLOC_THISSYSTEM", "HWLOC_ALLOW",
        "HWLOC_VIRTUAL_LINUX_OSDEV", "PMIX_MCA_pmix_hwloc_topo_file",
        "PMIX_MCA_pmix_hwloc_test_cpuset"}) {
    if (env.count(steering) != 0) {
      return false;
    }
  }
  return true;
}

std::optional<std::string> read_cached_topology(const std::string& path,
                                                const std::string& fingerprint) {
  return posix::read_cache_file(path, std::string(k_topology_magic) + fingerprint,
                                k_max_topology_bytes);
}

bool write_cached_topology(const std::string& path, const std::string& fingerprint,
                           std::string_view xml) {
  return posix::write_cache_file(path, std::string(k_topology_magic) + fingerprint, xml);
}

}  // namespace ddplaunch
