// The machine's hwloc topology, kept between launches (ccache's habit: the
// slow answer is computed once and keyed by everything it depends on).
// hwloc's discovery of a machine (sysfs, PCI) is most of libpmix's start,
// 13 ms of a launch that otherwise takes a few. The PMIx server is handed the
// topology read back from this cache instead (PMIX_TOPOLOGY2), and shares it
// with the ranks as before. Nothing here calls hwloc: hwloc_topology.cpp does.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/env_map.hpp"

namespace ddplaunch {

// What the topology depends on, as one line: the boot (boot_id, so a
// reboot or a changed machine starts over), the host name, this process's
// allowed CPUs and memory nodes (a Slurm step's cgroup sees fewer), the
// online CPUs, the PCI devices and the network interfaces present (a
// hot-plugged or lost device), and `hwloc_version` (the library that wrote
// it). The roots are "/proc" and "/sys" but for tests.
std::string topology_fingerprint(unsigned hwloc_version, const std::string& proc_root = "/proc",
                                 const std::string& sys_root = "/sys");

// Where this user's cache lives: temp_dir()/ddplaunch-topology-<euid>.xml
// (cleared with the temporary directory, one file per user).
std::string topology_cache_path();

// Whether the cache may be used: not when the user steers hwloc or libpmix's
// own topology (HWLOC_XMLFILE, HWLOC_SYNTHETIC, HWLOC_FSROOT, HWLOC_COMPONENTS,
// HWLOC_PLUGINS_*, PMIX_MCA_pmix_hwloc_*), nor with DDPLAUNCH_TOPOLOGY_CACHE=0.
bool topology_cache_enabled(const EnvMap& env);

// The topology's XML from `path` when the file is this user's own regular
// file, not writable by others, and was written for `fingerprint`; nullopt
// otherwise (missing, stale, foreign, unreadable: the caller discovers).
std::optional<std::string> read_cached_topology(const std::string& path,
                                                const std::string& fingerprint);

// Replaces `path` with `xml` for `fingerprint` (a private temporary file
// renamed over it: a reader sees the old file or the new one, never half).
// False when it cannot (a full disk, another user's file in the way).
bool write_cached_topology(const std::string& path, const std::string& fingerprint,
                           std::string_view xml);

}  // namespace ddplaunch
