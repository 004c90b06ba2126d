// The tf style of worker environment (--env-style tf): TF_CONFIG as
// TensorFlow's MultiWorkerMirroredStrategy reads it,
//   {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": RANK}}
// with the same cluster list, ordered by rank, on every worker; each worker's
// port was reserved on its node and gathered through the store; and, for
// ParameterServerStrategy, "chief" and "ps" lists too (TfRoles). Pure.
#pragma once

#include <string>

#include "config/env_map.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// Parameter-server jobs (--tf-chief, --tf-ps N), placed by rank: with a chief,
// rank 0 is chief:0; the next N ranks are ps:0..N-1; every other rank is a
// worker, indexed from 0 in rank order. Without either, every rank is a worker.
struct TfRoles {
  bool chief = false;
  int ps = 0;
};

// TF_CONFIG for one local rank; "" when the layout has no worker endpoints.
std::string tf_config(const JobLayout& layout, int local_rank, const TfRoles& roles = {});

}  // namespace ddplaunch
