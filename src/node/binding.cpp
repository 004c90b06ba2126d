#include "node/binding.hpp"

#include <algorithm>
#include <set>

#include "config/launch_error.hpp"

namespace ddplaunch {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    out += (out.empty() ? "" : ",") + item;
  }
  return out;
}

void bind_cpus(const Config& config, int nproc, const NodeResources& node,
               std::vector<Binding>& out, std::vector<std::string>& notes) {
  const auto& cpus = node.allowed_cpus;
  if (config.cpu_bind == CpuBind::k_none || cpus.empty()) {
    return;
  }
  const auto n = static_cast<int>(cpus.size());
  if (config.cpu_bind == CpuBind::k_numa && node.numa_cpus.size() > 1) {
    // Ranks in blocks: the first nproc/N ranks on NUMA node 0, and so on.
    const auto numa = static_cast<int>(node.numa_cpus.size());
    std::vector<int> sharing(static_cast<size_t>(numa), 0);
    for (int lr = 0; lr < nproc; ++lr) {
      ++sharing[static_cast<size_t>(lr * numa / nproc)];
    }
    for (int lr = 0; lr < nproc; ++lr) {
      const auto node_index = static_cast<size_t>(lr * numa / nproc);
      auto& b = out[static_cast<size_t>(lr)];
      b.cpus = node.numa_cpus[node_index];
      b.omp_threads = std::max(1, static_cast<int>(b.cpus.size()) / sharing[node_index]);
    }
    return;
  }
  if (config.cpu_bind == CpuBind::k_numa) {
    notes.push_back(
        "--cpu-bind numa: this node has one NUMA node with allowed CPUs; every rank "
        "gets all of them (" +
        format_cpu_list(cpus) + ")");
    for (auto& b : out) {
      b.cpus = cpus;
      b.omp_threads = std::max(1, n / nproc);
    }
    return;
  }
  if (nproc > n) {
    notes.push_back("--cpu-bind cores: " + std::to_string(nproc) + " workers share " +
                    std::to_string(n) + " allowed CPUs; some share one CPU");
  }
  for (int lr = 0; lr < nproc; ++lr) {
    auto& b = out[static_cast<size_t>(lr)];
    if (nproc <= n) {
      b.cpus.assign(cpus.begin() + lr * n / nproc, cpus.begin() + (lr + 1) * n / nproc);
    } else {
      b.cpus = {cpus[static_cast<size_t>(lr % n)]};
    }
    b.omp_threads = static_cast<int>(b.cpus.size());
  }
}

void bind_gpus(const Config& config, int nproc, const NodeResources& node,
               std::vector<Binding>& out, std::vector<std::string>& notes) {
  const auto& ids = node.gpu_ids;
  int per = config.gpus_per_proc;
  if (per == 0 && config.env_tf && nproc > 1 && !ids.empty()) {
    // TensorFlow takes every GPU it sees: each worker its own slice.
    if (static_cast<int>(ids.size()) < nproc) {
      notes.push_back("--env-style tf: " + std::to_string(nproc) + " workers and " +
                      std::to_string(ids.size()) +
                      " GPUs: every worker sees them all (give --gpus-per-proc to choose)");
      return;
    }
    per = static_cast<int>(ids.size()) / nproc;
  }
  if (per == 0 && config.virtual_local_rank) {
    if (ids.empty()) {
      // No GPU list known (torchrun's rule too): local rank N sees device N.
      for (int lr = 0; lr < nproc; ++lr) {
        out[static_cast<size_t>(lr)].gpus = {std::to_string(lr)};
        out[static_cast<size_t>(lr)].set_gpus = true;
      }
      return;
    }
    per = 1;  // each worker its own one, seen as device 0
  }
  if (per == 0) {
    return;
  }
  const long need = static_cast<long>(per) * nproc;
  if (need > static_cast<long>(ids.size())) {
    const std::string why = config.gpus_per_proc > 0
                                ? "--gpus-per-proc " + std::to_string(per)
                                : std::string("--virtual-local-rank (one GPU each)");
    throw UsageError(
        why + " for " + std::to_string(nproc) + " workers needs " + std::to_string(need) +
        " GPUs; this node may use " + std::to_string(ids.size()) + " (from " + node.gpu_source +
        (ids.empty() ? "" : ": " + join(ids)) + "); lower --gpus-per-proc or --nproc-per-node");
  }
  for (int lr = 0; lr < nproc; ++lr) {
    auto& b = out[static_cast<size_t>(lr)];
    b.gpus.assign(ids.begin() + lr * per, ids.begin() + (lr + 1) * per);
    b.set_gpus = true;
  }
}

}  // namespace

std::vector<Binding> plan_bindings(const Config& config, int nproc, const NodeResources& node,
                                   std::vector<std::string>& notes) {
  std::vector<Binding> out(static_cast<size_t>(std::max(nproc, 0)));
  bind_cpus(config, nproc, node, out, notes);
  bind_gpus(config, nproc, node, out, notes);
  return out;
}

std::string describe_binding(const Binding& b) {
  std::string cpus = b.cpus.empty() ? "inherited" : format_cpu_list(b.cpus);
  std::string gpus = b.set_gpus ? join(b.gpus) : "inherited";
  return "CPUs " + cpus + ", GPUs " + gpus;
}

int usable_cpus(const NodeResources& node, const std::vector<Binding>& bindings) {
  std::set<int> bound;
  for (const auto& b : bindings) {
    if (b.cpus.empty()) {
      bound.clear();  // one rank inherits the affinity: all of it is in use
      break;
    }
    bound.insert(b.cpus.begin(), b.cpus.end());
  }
  if (!bound.empty()) {
    return static_cast<int>(bound.size());
  }
  return node.allowed_cpus.empty() ? node.cpus : static_cast<int>(node.allowed_cpus.size());
}

}  // namespace ddplaunch
