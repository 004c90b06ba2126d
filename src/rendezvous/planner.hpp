// RendezvousPlanner: the store host's pure rules for forming a job. It is
// fed each node's join record in arrival order, refuses one that disagrees
// with the job (another --nnodes, --rdzv-id, --max-restarts or rendezvous
// version, a node rank claimed twice) with the message every agent prints, says who is still
// missing, and once every node has joined assigns automatic node ranks and
// builds the Topology. No I/O; not thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace ddplaunch {

inline constexpr int k_rendezvous_version = 4;  // 4: the plan holds node sizes; a key per node

// What one agent says about itself when it joins (docs/PROTOCOL.md).
struct JoinRecord {
  int version = k_rendezvous_version;
  std::string run_id;
  std::string command;  // the program and its arguments, as the user gave them
  int nnodes = 1;
  int nproc = 1;
  int node_rank = -1;  // -1: automatic
  std::string host;
  std::string addr;
  std::vector<int> ports;   // a port reserved for each of its workers (--env-style tf)
  bool store_host = false;  // this agent hosts the store
  int arrival = 0;          // 0 for the first agent to join, 1 for the next, ...
  int max_restarts = 0;     // every node must restart alike
  bool operator==(const JoinRecord&) const = default;
};

// "node 2 (host, addr)", or "the node that joined 3rd (host, addr)" before
// automatic ranks are assigned.
std::string describe_node(const JoinRecord& record);

// What the store host publishes once every node has joined.
struct JobPlan {
  Topology topology;
  std::vector<int> node_rank_of_arrival;  // [arrival] -> the node rank it got
  bool operator==(const JobPlan&) const = default;
};

class RendezvousPlanner {
 public:
  // `host` is the store host's own record: the job is what it says.
  explicit RendezvousPlanner(JoinRecord host) : m_expected(std::move(host)) {}

  // Takes the next record in arrival order. Returns the error that ends
  // rendezvous on every node, or nullopt when the node may join.
  std::optional<std::string> add(const JoinRecord& record);

  int joined() const { return static_cast<int>(m_joined.size()); }
  bool complete() const { return joined() >= m_expected.nnodes; }
  // Who has not joined: the unclaimed node ranks when every node that joined
  // gave its rank ("node 2, node 3"), else how many ("2 nodes").
  std::string missing() const;

  // Once complete(): the store host is node 0 unless another node claimed 0;
  // other automatic ranks are the lowest free ones, in arrival order.
  JobPlan plan(const std::string& worker_addr, int worker_port) const;

 private:
  JoinRecord m_expected;
  std::vector<JoinRecord> m_joined;
};

}  // namespace ddplaunch
