#include "topology/topology.hpp"

#include <algorithm>
#include <stdexcept>

namespace ddplaunch {

void assign_ranks(Topology& t) {
  std::sort(t.nodes.begin(), t.nodes.end(),
            [](const NodeEntry& a, const NodeEntry& b) { return a.node_rank < b.node_rank; });
  int next = 0;
  for (auto& n : t.nodes) {
    n.first_rank = next;
    n.workers.resize(static_cast<size_t>(n.nproc));
    for (int lr = 0; lr < n.nproc; ++lr) {
      n.workers[static_cast<size_t>(lr)].rank = next + lr;
      n.workers[static_cast<size_t>(lr)].local_rank = lr;
    }
    next += n.nproc;
  }
  t.world_size = next;
}

Topology uniform_topology(int nnodes, int nproc, int node_rank, const std::string& host,
                          const std::string& addr, const std::string& master_addr,
                          int worker_port) {
  Topology t;
  t.master_addr = master_addr;
  t.master_port = worker_port;
  for (int n = 0; n < nnodes; ++n) {
    NodeEntry e;
    e.node_rank = n;
    e.nproc = nproc;
    if (n == node_rank) {
      e.host = host;
      e.addr = addr;
    }
    t.nodes.push_back(std::move(e));
  }
  assign_ranks(t);
  return t;
}

JobLayout layout_of(const Topology& t, int node_rank, const std::string& run_id,
                    const std::string& role, int max_restarts) {
  auto it = std::find_if(t.nodes.begin(), t.nodes.end(),
                         [&](const NodeEntry& n) { return n.node_rank == node_rank; });
  if (it == t.nodes.end()) {
    throw std::out_of_range("node " + std::to_string(node_rank) + " is not in the job");
  }
  JobLayout l;
  l.node_rank = node_rank;
  l.nnodes = static_cast<int>(t.nodes.size());
  l.local_world_size = it->nproc;
  l.world_size = t.world_size;
  l.rank_offset = it->first_rank;
  bool ports = true;
  for (const auto& n : t.nodes) {
    l.node_sizes.push_back(n.nproc);
    for (const auto& w : n.workers) {
      ports = ports && w.port > 0 && !n.addr.empty();
      l.worker_endpoints.push_back(n.addr + ":" + std::to_string(w.port));
    }
  }
  if (!ports) {
    l.worker_endpoints.clear();
  }
  l.master_addr = t.master_addr;
  l.master_port = t.master_port;
  l.run_id = run_id;
  l.role = role;
  l.max_restarts = max_restarts;
  l.hostname = it->host;
  return l;
}

}  // namespace ddplaunch
