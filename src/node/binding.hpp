// Binding: which CPUs and GPUs each local rank gets (--cpu-bind,
// --gpus-per-proc, and TensorFlow's GPU slices). Pure: computed from the
// configuration and the NodeResources probed at start.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"
#include "node/resources.hpp"

namespace ddplaunch {

struct Binding {
  std::vector<int> cpus;          // empty: the launcher's affinity, inherited
  std::vector<std::string> gpus;  // CUDA_VISIBLE_DEVICES entries; empty: inherited as is
  int omp_threads = 0;            // OMP_NUM_THREADS unless set; 0: the usual rule
  bool set_gpus = false;          // CUDA_VISIBLE_DEVICES is this rank's own list
};

// One Binding per local rank. Throws UsageError when --gpus-per-proc asks for
// more GPUs than this node may use. `notes` receives what to say once.
std::vector<Binding> plan_bindings(const Config& config, int nproc, const NodeResources& node,
                                   std::vector<std::string>& notes);

// How many CPUs the node's ranks may use: those their bindings give them
// together, else the launcher's affinity, else the online CPUs.
int usable_cpus(const NodeResources& node, const std::vector<Binding>& bindings);

// "CPUs 0-3, GPUs 0,1" for --report-bindings.
std::string describe_binding(const Binding& binding);

}  // namespace ddplaunch
