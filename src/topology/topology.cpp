#include "topology/topology.hpp"

#include <algorithm>
#include <stdexcept>

namespace ddplaunch {

namespace {

void fill_slots(NodeEntry& n) {
  n.workers.resize(static_cast<size_t>(n.nproc));
  for (int lr = 0; lr < n.nproc; ++lr) {
    n.workers[static_cast<size_t>(lr)].rank = n.first_rank + lr;
    n.workers[static_cast<size_t>(lr)].local_rank = lr;
  }
}

}  // namespace

int Topology::nnodes() const {
  int n = 0;
  for (const auto& run : sizes) {
    n += run.count;
  }
  return n;
}

const NodeEntry* Topology::find(int node_rank) const {
  auto it = std::lower_bound(nodes.begin(), nodes.end(), node_rank,
                             [](const NodeEntry& n, int r) { return n.node_rank < r; });
  return it != nodes.end() && it->node_rank == node_rank ? &*it : nullptr;
}

void assign_ranks(Topology& t) {
  std::sort(t.nodes.begin(), t.nodes.end(),
            [](const NodeEntry& a, const NodeEntry& b) { return a.node_rank < b.node_rank; });
  int next = 0;
  t.sizes.clear();
  for (auto& n : t.nodes) {
    n.first_rank = next;
    fill_slots(n);
    next += n.nproc;
    if (!t.sizes.empty() && t.sizes.back().nproc == n.nproc) {
      ++t.sizes.back().count;
    } else {
      t.sizes.push_back(SizeRun{n.nproc, 1});
    }
  }
  t.world_size = next;
}

NodeEntry entry_from_sizes(const std::vector<SizeRun>& sizes, int node_rank) {
  int first_node = 0;
  long long first_rank = 0;
  for (const auto& run : sizes) {
    if (node_rank >= first_node && node_rank - first_node < run.count) {
      NodeEntry e;
      e.node_rank = node_rank;
      e.nproc = run.nproc;
      e.first_rank =
          static_cast<int>(first_rank + static_cast<long long>(node_rank - first_node) * run.nproc);
      fill_slots(e);
      return e;
    }
    first_node += run.count;
    first_rank += static_cast<long long>(run.count) * run.nproc;
  }
  throw std::out_of_range("node " + std::to_string(node_rank) + " is not in the job");
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
  const NodeEntry* self = t.find(node_rank);
  if (self == nullptr) {
    throw std::out_of_range("node " + std::to_string(node_rank) + " is not in the job");
  }
  JobLayout l;
  l.node_rank = node_rank;
  l.nnodes = t.nnodes();
  l.local_world_size = self->nproc;
  l.world_size = t.world_size;
  l.rank_offset = self->first_rank;
  l.node_sizes = t.sizes;
  bool ports = t.complete();
  for (const auto& n : t.nodes) {
    for (const auto& w : n.workers) {
      ports = ports && w.port > 0 && !n.addr.empty();
      if (ports) {
        l.worker_endpoints.push_back(n.addr + ":" + std::to_string(w.port));
      }
    }
  }
  if (!ports) {
    l.worker_endpoints.clear();
  }
  l.master_addr = t.master_addr;
  l.master_port = t.master_port;
  l.run_id = run_id;
  l.job_id = t.job_id;
  l.tree_fanout = t.tree_fanout;
  l.role = role;
  l.max_restarts = max_restarts;
  l.hostname = self->host;
  return l;
}

}  // namespace ddplaunch
