#include "node/nvml.hpp"

#include <limits>
#include <sstream>

#include "config/integer.hpp"
#include "posix/library.hpp"

namespace ddplaunch {

// NVML's types, as its ABI has them. A named namespace: NvmlSession::Api,
// which has external linkage, holds pointers to functions taking them.
namespace nvml_abi {

using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn k_success = 0;
constexpr NvmlReturn k_insufficient_size = 7;

struct NvmlMemory {
  unsigned long long total, free, used;
};
// nvmlProcessInfo_t of the _v2/_v3 calls, and of the first one.
struct NvmlProcess {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id, compute_instance_id;
};
struct NvmlProcessV1 {
  unsigned pid;
  unsigned long long used_gpu_memory;
};

}  // namespace nvml_abi

using namespace nvml_abi;

// The calls this launcher makes into NVML, typed here: nvml.h comes with the
// CUDA toolkit, which a build need not have. Bound once per process.
struct NvmlSession::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*by_uuid)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  const char* (*error)(NvmlReturn) = nullptr;
  // The newest of these the driver has (older drivers lack _v3 and _v2).
  NvmlReturn (*processes)(NvmlDevice, unsigned*, NvmlProcess*) = nullptr;
  NvmlReturn (*processes_v1)(NvmlDevice, unsigned*, NvmlProcessV1*) = nullptr;

  bool load(std::string& why) {
    void* h = posix::open_library("libnvidia-ml.so.1", nullptr, why);
    if (h == nullptr) {
      why = "no NVML (" + why + ")";
      return false;
    }
    auto sym = [h, &why](auto& fn, const char* name) {
      return posix::load_symbol(h, fn, name, why, "libnvidia-ml");
    };
    if (!sym(init, "nvmlInit_v2") || !sym(shutdown, "nvmlShutdown") ||
        !sym(count, "nvmlDeviceGetCount_v2") || !sym(by_index, "nvmlDeviceGetHandleByIndex_v2") ||
        !sym(by_uuid, "nvmlDeviceGetHandleByUUID") || !sym(memory, "nvmlDeviceGetMemoryInfo") ||
        !sym(error, "nvmlErrorString")) {
      return false;
    }
    for (const char* name :
         {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}) {
      if (processes == nullptr) {
        posix::find_symbol(h, processes, name);
      }
    }
    posix::find_symbol(h, processes_v1, "nvmlDeviceGetComputeRunningProcesses");
    return true;  // the library stays loaded for the process's life
  }
};

std::unique_ptr<NvmlSession> NvmlSession::open(std::string& why) {
  static Api api;
  static std::string load_error;
  static const bool loaded = api.load(load_error);
  if (!loaded) {
    why = load_error;
    return nullptr;
  }
  if (const NvmlReturn rc = api.init(); rc != k_success) {
    why = std::string("NVML does not start (") + api.error(rc) + ")";
    return nullptr;
  }
  return std::unique_ptr<NvmlSession>(new NvmlSession(api));
}

NvmlSession::~NvmlSession() {
  m_api.shutdown();
}

std::vector<std::string> NvmlSession::visible(const EnvMap& env) const {
  std::vector<std::string> ids;
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
    std::stringstream in(it->second);
    for (std::string id; std::getline(in, id, ',');) {
      if (!id.empty()) {
        ids.push_back(id);
      }
    }
    return ids;
  }
  unsigned count = 0;
  m_api.count(&count);
  for (unsigned i = 0; i < count; ++i) {
    ids.push_back(std::to_string(i));
  }
  return ids;
}

void* NvmlSession::device(const std::string& id, int& rc) const {
  NvmlDevice dev = nullptr;
  // An index, else a UUID (CUDA_VISIBLE_DEVICES takes both); anything else
  // is a UUID NVML does not know, never an exception.
  const auto index = parse_integer_in(id, 0, std::numeric_limits<unsigned>::max());
  rc =
      index ? m_api.by_index(static_cast<unsigned>(*index), &dev) : m_api.by_uuid(id.c_str(), &dev);
  return rc == k_success ? dev : nullptr;
}

bool NvmlSession::responds(const std::string& id, std::string& error) const {
  int rc = 0;
  NvmlDevice dev = device(id, rc);
  NvmlMemory mem{};
  if (dev != nullptr) {
    rc = m_api.memory(dev, &mem);
  }
  if (rc != k_success) {
    error = m_api.error(rc);
  }
  return rc == k_success;
}

std::optional<std::vector<pid_t>> NvmlSession::compute_processes(const std::string& id) const {
  const auto usage = compute_usage(id);
  if (!usage) {
    return std::nullopt;
  }
  std::vector<pid_t> pids;
  for (const auto& p : *usage) {
    pids.push_back(p.pid);
  }
  return pids;
}

std::optional<std::vector<NvmlSession::GpuProcess>> NvmlSession::compute_usage(
    const std::string& id) const {
  int rc = 0;
  NvmlDevice dev = device(id, rc);
  if (dev == nullptr) {
    return std::nullopt;
  }
  // NVML's "not available" value for a process's memory.
  constexpr unsigned long long k_unknown = ~0ULL;
  std::vector<GpuProcess> out;
  // Asked with room for 64, then again with what the driver says it needs.
  for (unsigned room = 64; room <= 65536;) {
    unsigned count = room;
    out.clear();
    if (m_api.processes != nullptr) {
      std::vector<NvmlProcess> found(room);
      rc = m_api.processes(dev, &count, found.data());
      for (unsigned i = 0; rc == k_success && i < count; ++i) {
        out.push_back({static_cast<pid_t>(found[i].pid),
                       found[i].used_gpu_memory == k_unknown ? 0 : found[i].used_gpu_memory});
      }
    } else if (m_api.processes_v1 != nullptr) {
      std::vector<NvmlProcessV1> found(room);
      rc = m_api.processes_v1(dev, &count, found.data());
      for (unsigned i = 0; rc == k_success && i < count; ++i) {
        out.push_back({static_cast<pid_t>(found[i].pid),
                       found[i].used_gpu_memory == k_unknown ? 0 : found[i].used_gpu_memory});
      }
    } else {
      return std::nullopt;
    }
    if (rc != k_insufficient_size) {
      break;
    }
    room = count > room ? count + 16 : room * 2;
  }
  if (rc != k_success) {
    return std::nullopt;
  }
  return out;
}

}  // namespace ddplaunch
