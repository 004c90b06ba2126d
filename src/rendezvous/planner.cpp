#include "rendezvous/planner.hpp"

#include <set>

namespace ddplaunch {

namespace {

std::string ordinal(int n) {
  const char* suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    suffix = n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  }
  return std::to_string(n) + suffix;
}

// A command line as messages show it: at most 120 characters.
std::string shorten(const std::string& command) {
  return command.size() <= 120 ? command : command.substr(0, 117) + "...";
}

}  // namespace

std::string describe_node(const JoinRecord& r) {
  std::string who = r.node_rank >= 0 ? "node " + std::to_string(r.node_rank)
                                     : "the node that joined " + ordinal(r.arrival + 1);
  return who + " (" + r.host + ", " + r.addr + ")";
}

std::optional<std::string> RendezvousPlanner::add(const JoinRecord& r) {
  if (r.version != m_expected.version) {
    return describe_node(r) + " speaks rendezvous version " + std::to_string(r.version) +
           ", node 0 version " + std::to_string(m_expected.version) +
           "; run the same ddplaunch on every node";
  }
  if (r.run_id != m_expected.run_id) {
    return describe_node(r) + " has --rdzv-id " + r.run_id + " but node 0 has " +
           m_expected.run_id + "; give every node the same job id";
  }
  if (r.command != m_expected.command) {
    // Two unrelated jobs that picked the same store port, or a mistyped node.
    return describe_node(r) + " runs '" + shorten(r.command) + "' but node 0 runs '" +
           shorten(m_expected.command) +
           "'; start the same program with the same arguments on every node, and give "
           "unrelated jobs their own --master-port";
  }
  if (r.nnodes != m_expected.nnodes) {
    return describe_node(r) + " has --nnodes " + std::to_string(r.nnodes) +
           " but node 0 has --nnodes " + std::to_string(m_expected.nnodes) +
           "; give every node the same --nnodes";
  }
  if (r.max_restarts != m_expected.max_restarts) {
    return describe_node(r) + " has --max-restarts " + std::to_string(r.max_restarts) +
           " but node 0 has --max-restarts " + std::to_string(m_expected.max_restarts) +
           "; give every node the same --max-restarts";
  }
  if (r.node_rank >= r.nnodes) {
    return describe_node(r) + " claims node rank " + std::to_string(r.node_rank) +
           ", out of range for --nnodes " + std::to_string(r.nnodes);
  }
  for (const auto& other : m_joined) {
    if (r.node_rank >= 0 && other.node_rank == r.node_rank) {
      return "node rank " + std::to_string(r.node_rank) + " is claimed twice: by " +
             describe_node(other) + " and by " + describe_node(r) +
             "; give each node its own --node-rank, or use auto";
    }
  }
  if (complete()) {
    return "more agents joined than --nnodes " + std::to_string(m_expected.nnodes) + ": " +
           describe_node(r) + " is not part of the job (is it started twice?)";
  }
  m_joined.push_back(r);
  return std::nullopt;
}

std::string RendezvousPlanner::missing() const {
  std::set<int> claimed;
  bool any_automatic = false;
  for (const auto& r : m_joined) {
    any_automatic = any_automatic || r.node_rank < 0;
    claimed.insert(r.node_rank);
  }
  const int count = m_expected.nnodes - joined();
  if (any_automatic) {
    return std::to_string(count) + (count == 1 ? " node" : " nodes");
  }
  std::string names;
  for (int n = 0; n < m_expected.nnodes; ++n) {
    if (!claimed.contains(n)) {
      names += (names.empty() ? "node " : ", node ") + std::to_string(n);
    }
  }
  return names;
}

JobPlan RendezvousPlanner::plan(const std::string& worker_addr, int worker_port) const {
  std::vector<JoinRecord> records = m_joined;
  std::set<int> taken;
  for (const auto& r : records) {
    if (r.node_rank >= 0) {
      taken.insert(r.node_rank);
    }
  }
  for (auto& r : records) {
    if (r.store_host && r.node_rank < 0 && !taken.contains(0)) {
      r.node_rank = 0;
      taken.insert(0);
    }
  }
  int next_free = 0;
  for (auto& r : records) {
    if (r.node_rank < 0) {
      while (taken.contains(next_free)) {
        ++next_free;
      }
      r.node_rank = next_free;
      taken.insert(next_free);
    }
  }
  JobPlan plan;
  plan.node_rank_of_arrival.resize(records.size());
  Topology& t = plan.topology;
  t.master_addr = worker_addr;
  t.master_port = worker_port;
  for (const auto& r : records) {
    if (r.arrival >= 0 && static_cast<size_t>(r.arrival) < records.size()) {
      plan.node_rank_of_arrival[static_cast<size_t>(r.arrival)] = r.node_rank;
    }
    NodeEntry n;
    n.node_rank = r.node_rank;
    n.host = r.host;
    n.addr = r.addr;
    n.nproc = r.nproc;
    if (static_cast<int>(r.ports.size()) == r.nproc) {
      for (int lr = 0; lr < r.nproc; ++lr) {
        n.workers.push_back(WorkerSlot{0, lr, r.ports[static_cast<size_t>(lr)]});
      }
    }
    t.nodes.push_back(std::move(n));
  }
  assign_ranks(t);
  return plan;
}

}  // namespace ddplaunch
