#include "rendezvous/preflight.hpp"

#include <algorithm>

namespace ddplaunch {

std::vector<int> preflight_peers(int node_rank, int nnodes) {
  std::vector<int> peers;
  if (nnodes <= 1 || node_rank < 0 || node_rank >= nnodes) {
    return peers;
  }
  auto add = [&](long long distance) {
    peers.push_back(static_cast<int>((node_rank + distance) % nnodes));
  };
  if (nnodes <= k_preflight_all_to_all) {
    for (int d = 1; d < nnodes; ++d) {
      add(d);
    }
    return peers;
  }
  for (int d = 1; d <= k_preflight_all_to_all - 1; ++d) {
    add(d);
  }
  for (long long d = 32; d < nnodes; d *= 2) {
    add(d);
  }
  return peers;
}

bool probes_master_port(int node_rank, int nnodes) {
  if (node_rank <= 0 || node_rank >= nnodes) {
    return false;
  }
  const int stride = (nnodes + k_preflight_master_probers - 1) / k_preflight_master_probers;
  return node_rank % stride == 0 || nnodes <= k_preflight_master_probers;
}

std::string describe_blocked(int from_node, const std::string& from_host,
                             const ProbeFailure& failure) {
  const ProbeTarget& t = failure.target;
  const bool v6 = t.addr.find(':') != std::string::npos;
  const std::string where = (v6 ? "[" + t.addr + "]" : t.addr) + ":" + std::to_string(t.port);
  return "node " + std::to_string(from_node) + " (" + from_host + ") cannot reach node " +
         std::to_string(t.node) + " (" + t.host + ") at " + where +
         (t.master_port ? " (MASTER_PORT, where rank 0's store will listen)"
                        : " (its probe port, on the address gloo and NCCL use)") +
         ": " + failure.error;
}

}  // namespace ddplaunch
