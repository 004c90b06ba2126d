#include "mpi/topology_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "posix/fd.hpp"

namespace ddplaunch {

namespace {

constexpr std::string_view k_magic = "ddplaunch-topology 1 ";
constexpr size_t k_max_cache_bytes = 64u << 20;  // hwloc's XML of a large machine: ~1 MiB

// The entries of a directory, sorted, space-separated ("" when it is absent).
std::string directory_names(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') {
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
  key += ";net=" + directory_names(sys_root + "/class/net");
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
        "PMIX_MCA_pmix_hwloc_topo_file", "PMIX_MCA_pmix_hwloc_test_cpuset"}) {
    if (env.count(steering) != 0) {
      return false;
    }
  }
  return true;
}

std::optional<std::string> read_cached_topology(const std::string& path,
                                                const std::string& fingerprint) {
  const posix::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 ||
      static_cast<size_t>(st.st_size) > k_max_cache_bytes) {
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return std::nullopt;  // changed under us: discover
    }
    got += static_cast<size_t>(n);
  }
  const size_t eol = text.find('\n');
  if (eol == std::string::npos ||
      std::string_view(text).substr(0, eol) != std::string(k_magic) + fingerprint) {
    return std::nullopt;
  }
  text.erase(0, eol + 1);
  return text;
}

bool write_cached_topology(const std::string& path, const std::string& fingerprint,
                           std::string_view xml) {
  std::string tmp = path + ".XXXXXX";
  const posix::Fd fd(::mkostemp(tmp.data(), O_CLOEXEC));  // mode 0600
  if (!fd) {
    return false;
  }
  const std::string header = std::string(k_magic) + fingerprint + "\n";
  if (!posix::write_all(fd.get(), header) || !posix::write_all(fd.get(), xml) ||
      ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace ddplaunch
