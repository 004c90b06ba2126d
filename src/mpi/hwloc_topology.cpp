#include "mpi/hwloc_topology.hpp"

#include <unistd.h>

#include <cstdlib>

#include "log.hpp"
#include "mpi/topology_cache.hpp"
#include "posix/fd.hpp"
#include "posix/library.hpp"

#if DDPLAUNCH_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace ddplaunch {

#if !DDPLAUNCH_HAVE_HWLOC

std::unique_ptr<HwlocTopology> HwlocTopology::prepare(void*, std::string& why) {
  why = "this ddplaunch was built without libhwloc-dev";
  return nullptr;
}
bool HwlocTopology::obtain(std::string&) {
  return false;
}
void HwlocTopology::remember() {}
std::string HwlocTopology::describe() const {
  return "";
}
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

// hwloc unloads its plugins when the process's last topology is destroyed,
// and what they allocated is then lost: LeakSanitizer reports 1 KiB from an
// "<unknown module>" (the unloaded plugin) after each discovery. One
// topology, never loaded nor destroyed, keeps hwloc's components (and the
// plugins they loaded, if any) for the process's life. Its first call
// decides whether the plugins are loaded at all.
void init_components_once() {
  static hwloc_topology_t anchor = [] {
    hwloc_topology_t topology = nullptr;
    g_hwloc.init(&topology);
    return topology;
  }();
  (void)anchor;
}

// Whether this process runs one thread only (/proc/self/status).
bool single_threaded() {
  const auto status = posix::read_small_file("/proc/self/status").value_or("");
  return status.find("\nThreads:\t1\n") != std::string::npos;
}

}  // namespace

std::unique_ptr<HwlocTopology> HwlocTopology::prepare(void* libpmix, std::string& why) {
  if (g_hwloc.init == nullptr && !g_hwloc.load_from(libpmix, why)) {
    return nullptr;
  }
  std::unique_ptr<HwlocTopology> self(new HwlocTopology());
  self->m_fingerprint = topology_fingerprint(g_hwloc.api_version());
  self->m_xml = read_cached_topology(topology_cache_path(), self->m_fingerprint);
  if (self->m_xml && single_threaded()) {
    // Read from XML, the topology needs none of hwloc's plugins, which cost
    // ~3 ms and ~3 MiB to load (libxml2 and ICU, libX11, libpciaccess,
    // OpenCL). hwloc reads which to skip from the environment when its
    // components start, so HWLOC_PLUGINS_BLACKLIST is set around that one
    // call, here, while no other thread can read the environment (never in
    // a child's: none is started in between).
    ::setenv("HWLOC_PLUGINS_BLACKLIST",
             "hwloc_xml_libxml,hwloc_gl,hwloc_opencl,hwloc_pci,hwloc_cuda,"
             "hwloc_nvml,hwloc_rsmi,hwloc_levelzero",
             1);
    init_components_once();
    ::unsetenv("HWLOC_PLUGINS_BLACKLIST");
  }
  return self;
}

bool HwlocTopology::obtain(std::string& why) {
  init_components_once();  // with the plugins, unless prepare() started them without
  if (m_xml) {
    // Read back as this machine's (binding works), not as a foreign one,
    // with what its discovery supported: the ranks are shared the same
    // topology as when it was discovered, to the byte.
    hwloc_topology_t topology =
        configured(HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM | HWLOC_TOPOLOGY_FLAG_IMPORT_SUPPORT);
    if (topology != nullptr && (g_hwloc.set_xmlbuffer(topology, m_xml->c_str(),
                                                      static_cast<int>(m_xml->size() + 1)) != 0 ||
                                g_hwloc.load(topology) != 0)) {
      g_hwloc.destroy(topology);
      topology = nullptr;
    }
    m_xml.reset();
    if (topology != nullptr) {
      m_topology = topology;
      m_from_cache = true;
      return true;
    }
    // A damaged cache: discovered below, maybe without the plugins this
    // process skipped, so not cached again; removed, so that the next
    // launch discovers with them and caches that.
    ::unlink(topology_cache_path().c_str());
    m_written = true;
    m_damaged = true;
  }
  hwloc_topology_t topology = configured(0);
  if (topology == nullptr || g_hwloc.load(topology) != 0) {
    if (topology != nullptr) {
      g_hwloc.destroy(topology);
    }
    why = "hwloc could not read this machine's topology";
    return false;
  }
  m_topology = topology;
  return true;
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

std::string HwlocTopology::describe() const {
  if (m_from_cache) {
    return "read from " + topology_cache_path();
  }
  return m_damaged ? "discovered (a damaged cache was removed)"
                   : "discovered, now cached in " + topology_cache_path();
}

HwlocTopology::~HwlocTopology() {
  if (m_topology != nullptr) {
    g_hwloc.destroy(static_cast<hwloc_topology_t>(m_topology));
  }
}

#endif

}  // namespace ddplaunch
