#include "mpi/hwloc_topology.hpp"

#include "log.hpp"
#include "mpi/topology_cache.hpp"
#include "posix/library.hpp"

#if DDPLAUNCH_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace ddplaunch {

#if !DDPLAUNCH_HAVE_HWLOC

std::unique_ptr<HwlocTopology> HwlocTopology::obtain(void*, std::string& why) {
  why = "this ddplaunch was built without libhwloc-dev";
  return nullptr;
}
void HwlocTopology::remember() {}
HwlocTopology::~HwlocTopology() = default;

#else

namespace {

// The calls used, from the hwloc libpmix was linked with (hwloc 2.1 or
// later: set_components).
struct HwlocApi {
  decltype(&hwloc_get_api_version) api_version = nullptr;
  decltype(&hwloc_topology_init) init = nullptr;
  decltype(&hwloc_topology_set_type_filter) set_type_filter = nullptr;
  decltype(&hwloc_topology_set_components) set_components = nullptr;
  decltype(&hwloc_topology_set_flags) set_flags = nullptr;
  decltype(&hwloc_topology_set_xmlbuffer) set_xmlbuffer = nullptr;
  decltype(&hwloc_topology_load) load = nullptr;
  decltype(&hwloc_topology_export_xmlbuffer) export_xmlbuffer = nullptr;
  decltype(&hwloc_free_xmlbuffer) free_xmlbuffer = nullptr;
  decltype(&hwloc_topology_destroy) destroy = nullptr;

  bool load_from(void* handle, std::string& why) {
    auto sym = [handle, &why](auto& fn, const char* name) {
      return posix::load_symbol(handle, fn, name, why, "libpmix's hwloc");
    };
    if (!(sym(api_version, "hwloc_get_api_version") && sym(init, "hwloc_topology_init") &&
          sym(set_type_filter, "hwloc_topology_set_type_filter") &&
          sym(set_components, "hwloc_topology_set_components") &&
          sym(set_flags, "hwloc_topology_set_flags") &&
          sym(set_xmlbuffer, "hwloc_topology_set_xmlbuffer") && sym(load, "hwloc_topology_load") &&
          sym(export_xmlbuffer, "hwloc_topology_export_xmlbuffer") &&
          sym(free_xmlbuffer, "hwloc_free_xmlbuffer") && sym(destroy, "hwloc_topology_destroy"))) {
      return false;
    }
    // The same major version as the header these calls were declared by,
    // and 2.3 or later (HWLOC_TOPOLOGY_FLAG_IMPORT_SUPPORT).
    const unsigned version = api_version();
    if ((version >> 16) != (HWLOC_API_VERSION >> 16) || version < 0x00020300) {
      why = "libpmix's hwloc is not hwloc 2.3 or later";
      return false;
    }
    return true;
  }
};

HwlocApi g_hwloc;

// libpmix's own settings for a topology it discovers or is handed
// (pmix_hwloc.c's set_flags): the important I/O devices (the NICs and GPUs
// Open MPI places ranks near), no OpenGL displays.
hwloc_topology_t configured(unsigned long flags) {
  hwloc_topology_t topology = nullptr;
  if (g_hwloc.init(&topology) != 0) {
    return nullptr;
  }
  for (const auto type : {HWLOC_OBJ_BRIDGE, HWLOC_OBJ_PCI_DEVICE, HWLOC_OBJ_OS_DEVICE}) {
    g_hwloc.set_type_filter(topology, type, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  }
  g_hwloc.set_components(topology, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
  if (g_hwloc.set_flags(topology, flags) != 0) {
    g_hwloc.destroy(topology);
    return nullptr;
  }
  return topology;
}

}  // namespace

std::unique_ptr<HwlocTopology> HwlocTopology::obtain(void* libpmix, std::string& why) {
  if (g_hwloc.init == nullptr && !g_hwloc.load_from(libpmix, why)) {
    return nullptr;
  }
  // hwloc unloads its plugins when the process's last topology is
  // destroyed, and what they allocated is then lost: LeakSanitizer reports
  // 1 KiB from an "<unknown module>" (the unloaded plugin) after each
  // discovery. One topology, never loaded nor destroyed, keeps them loaded
  // for the process's life.
  static hwloc_topology_t plugins_anchor = [] {
    hwloc_topology_t anchor = nullptr;
    g_hwloc.init(&anchor);
    return anchor;
  }();
  (void)plugins_anchor;
  std::unique_ptr<HwlocTopology> self(new HwlocTopology());
  self->m_fingerprint = topology_fingerprint(g_hwloc.api_version());
  if (const auto xml = read_cached_topology(topology_cache_path(), self->m_fingerprint)) {
    // Read back as this machine's (binding works), not as a foreign one,
    // with what its discovery supported: the ranks are shared the same
    // topology as when it was discovered, to the byte.
    hwloc_topology_t topology =
        configured(HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM | HWLOC_TOPOLOGY_FLAG_IMPORT_SUPPORT);
    if (topology != nullptr &&
        (g_hwloc.set_xmlbuffer(topology, xml->c_str(), static_cast<int>(xml->size() + 1)) != 0 ||
         g_hwloc.load(topology) != 0)) {
      g_hwloc.destroy(topology);
      topology = nullptr;  // a damaged cache: discover
    }
    if (topology != nullptr) {
      self->m_topology = topology;
      self->m_from_cache = true;
      return self;
    }
  }
  hwloc_topology_t topology = configured(0);
  if (topology == nullptr || g_hwloc.load(topology) != 0) {
    if (topology != nullptr) {
      g_hwloc.destroy(topology);
    }
    why = "hwloc could not read this machine's topology";
    return nullptr;
  }
  self->m_topology = topology;
  return self;
}

void HwlocTopology::remember() {
  if (m_from_cache || m_written || m_topology == nullptr) {
    return;
  }
  m_written = true;
  char* xml = nullptr;
  int length = 0;
  auto* topology = static_cast<hwloc_topology_t>(m_topology);
  if (g_hwloc.export_xmlbuffer(topology, &xml, &length, 0) != 0) {
    return;
  }
  // length counts the terminating NUL.
  const std::string_view text(xml, length > 0 ? static_cast<size_t>(length - 1) : 0);
  if (!write_cached_topology(topology_cache_path(), m_fingerprint, text)) {
    log::debug("the machine's topology was not cached in {}", topology_cache_path());
  }
  g_hwloc.free_xmlbuffer(topology, xml);
}

HwlocTopology::~HwlocTopology() {
  if (m_topology != nullptr) {
    g_hwloc.destroy(static_cast<hwloc_topology_t>(m_topology));
  }
}

#endif

}  // namespace ddplaunch
