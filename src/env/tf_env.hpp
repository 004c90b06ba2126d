// The tf style of worker environment (--env-style tf): TF_CONFIG as
// TensorFlow's MultiWorkerMirroredStrategy reads it,
//   {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": RANK}}
// with the same cluster list, ordered by rank, on every worker; each worker's
// port was reserved on its node and gathered through the store. Pure.
#pragma once

#include <string>

#include "env/env_map.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// TF_CONFIG for one local rank; "" when the layout has no worker endpoints.
std::string tf_config(const JobLayout& layout, int local_rank);

}  // namespace ddplaunch
