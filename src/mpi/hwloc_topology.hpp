// The hwloc topology the PMIx server shares with its ranks, read from this
// user's topology cache (mpi/topology_cache) when it fits the machine, else
// discovered the way libpmix would discover it and then cached. hwloc is
// called through libpmix's own copy (dlsym in libpmix's handle): the
// launcher links nothing more.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace ddplaunch {

class HwlocTopology {
 public:
  // On the thread that starts the server, before it starts it, while it
  // may be the process's only thread: loads hwloc's calls (nullptr, with
  // `why`, when libpmix has no usable hwloc: libpmix then discovers the
  // machine itself, as without a cache) and reads the cache. On a hit in a
  // single-threaded process, hwloc starts without its plugins (not needed
  // to read XML; ~3 ms and ~3 MiB).
  static std::unique_ptr<HwlocTopology> prepare(void* libpmix, std::string& why);
  // Then, on the server's thread: the topology, read from the cache or
  // discovered; false, with `why`, when hwloc failed.
  bool obtain(std::string& why);
  ~HwlocTopology();
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;

  // The hwloc_topology_t, for PMIX_TOPOLOGY2.
  void* get() const { return m_topology; }
  bool from_cache() const { return m_from_cache; }
  // Where it came from, for the debug log: "read from PATH", "discovered,
  // now cached in PATH", or "discovered (a damaged cache was removed)".
  std::string describe() const;
  // Writes a discovered topology to the cache (once the server runs: off
  // the path of the launch that waits for it). Nothing for a cached one.
  void remember();

 private:
  HwlocTopology() = default;
  void* m_topology = nullptr;
  bool m_from_cache = false;
  bool m_written = false;
  bool m_damaged = false;  // the cache had the right key but no topology hwloc could read
  std::string m_fingerprint;
  std::optional<std::string> m_xml;  // the cached topology, until obtain()
};

}  // namespace ddplaunch
