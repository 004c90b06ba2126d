// The hwloc topology the PMIx server shares with its ranks, read from this
// user's topology cache (mpi/topology_cache) when it fits the machine, else
// discovered the way libpmix would discover it and then cached. hwloc is
// called through libpmix's own copy (dlsym in libpmix's handle): the
// launcher links nothing more.
#pragma once

#include <memory>
#include <string>

namespace ddplaunch {

class HwlocTopology {
 public:
  // A topology for the server, or nullptr (no usable hwloc in libpmix, or
  // hwloc failed): libpmix then discovers the machine itself, as without
  // a cache. `libpmix` is the dlopen handle; `why` says why not.
  static std::unique_ptr<HwlocTopology> obtain(void* libpmix, std::string& why);
  ~HwlocTopology();
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;

  // The hwloc_topology_t, for PMIX_TOPOLOGY2.
  void* get() const { return m_topology; }
  bool from_cache() const { return m_from_cache; }
  // Writes a discovered topology to the cache (once the server runs: off
  // the path of the launch that waits for it). Nothing for a cached one.
  void remember();

 private:
  HwlocTopology() = default;
  void* m_topology = nullptr;
  bool m_from_cache = false;
  bool m_written = false;
  std::string m_fingerprint;
};

}  // namespace ddplaunch
