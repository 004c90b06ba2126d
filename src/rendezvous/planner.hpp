// RendezvousPlanner: the store host's pure rules for forming a job. It is
// fed each node's join record in arrival order, refuses one that disagrees
// with the job (another --nnodes, --rdzv-id, --max-restarts or rendezvous
// version, a node rank claimed twice) with the message every agent prints,
// says who is still missing, and once enough nodes have joined assigns node
// ranks (contiguous) and builds the Topology. In an elastic job (--nnodes
// MIN:MAX) it also keeps the membership from round to round: a node that joins
// once the job runs waits for the next round, a lost node leaves it. No I/O;
// not thread-safe.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "topology/topology.hpp"

namespace ddplaunch {

// 6: the command as a list (argv). 7: the network preflight (probe_port,
// the plan's preflight, rdzv/probe*). 8: the plan's job id (the PMIx
// namespace), an admission's job exit code. 9: join records stored by
// compare-and-set; an arrival given up ("vacant") is passed over.
inline constexpr int k_rendezvous_version = 10;

// What one agent says about itself when it joins (docs/PROTOCOL.md).
struct JoinRecord {
  int version = k_rendezvous_version;
  std::string run_id;
  // The program and its arguments, as the user gave them: compared word by
  // word, so `sh -c S sh "a b"` and `sh -c S sh a b` differ.
  std::vector<std::string> argv;
  int nnodes = 1;      // the most nodes (--nnodes MAX)
  int nnodes_min = 0;  // --nnodes MIN:MAX's MIN; 0: a fixed-size job
  int nproc = 1;
  int node_rank = -1;  // -1: automatic
  std::string host;
  std::string addr;
  std::vector<int> ports;   // a port reserved for each of its workers (--env-style tf)
  bool store_host = false;  // this agent hosts the store
  int arrival = 0;          // 0 for the first agent to join, 1 for the next, ...
  int max_restarts = 0;     // every node must restart alike
  // Why this node failed its health check (--health-check); empty: healthy.
  // Such a node does not join: an elastic job goes on without it, a
  // fixed-size job (or node 0 failing) ends at once.
  std::string health;
  // --restart-min-progress and --max-no-progress-restarts: alike too.
  int restart_min_progress = 0;
  int max_no_progress_restarts = 3;
  // Its network preflight listener (--preflight), on `addr`; 0: none.
  int probe_port = 0;
  // This launch's random id (node/identity.hpp): the store host's becomes
  // the job's (Topology::job_id). Not sent: no other node's is used.
  std::string job_id{};
  // Its --tree-fanout: the store host's becomes the job's
  // (Topology::tree_fanout). Not sent either.
  int tree_fanout = 8;
  bool operator==(const JoinRecord&) const = default;
};

// "node 2 (host, addr)", or "the node that joined 3rd (host, addr)" before
// automatic ranks are assigned.
std::string describe_node(const JoinRecord& record);

// A round's membership, as node 0 decides it once every node has joined (or
// when it regroups): the topology, and the node rank each arrival got.
struct RoundAssignment {
  Topology topology;
  // [arrival] -> the node rank it got; -1: not part of this round.
  std::vector<int> node_rank_of_arrival;
  std::vector<int> admitted;                // the arrivals that waited and join with this round
  std::vector<NodeReplacement> replaced{};  // of those, the spares in a lost node's place
  bool operator==(const RoundAssignment&) const = default;
};

// Why a join record is refused, and whom the refusal ends.
struct Refusal {
  std::string message;  // the one line the refused agents print
  // true: the job itself is misconfigured (nodes disagree on its shape), so
  // rendezvous ends on every node; false: only the node that joined is
  // refused (a stranger running another program on the same port, or one
  // node too many) and the job goes on waiting for its own nodes.
  bool whole_job = false;
  bool operator==(const Refusal&) const = default;
};

class RendezvousPlanner {
 public:
  // `host` is the store host's own record: the job is what it says.
  explicit RendezvousPlanner(JoinRecord host) : m_expected(std::move(host)) {}

  // Takes the next record in arrival order (the store host's own first,
  // whatever its arrival). Before plan(): nullopt when the node joins, else
  // the refusal (whole_job: a disagreement that ends rendezvous everywhere).
  // After it: an elastic job queues the node for the next round (nullopt) or
  // refuses it alone; a fixed-size job refuses it alone (one node too many).
  std::optional<Refusal> add(const JoinRecord& record);

  bool elastic() const;
  int min_nodes() const;
  int max_nodes() const { return m_expected.nnodes; }
  int joined() const { return static_cast<int>(m_joined.size()); }
  bool complete() const { return joined() >= max_nodes(); }
  bool enough() const { return joined() >= min_nodes(); }
  // Who has not joined: the unclaimed node ranks when every node that joined
  // gave its rank ("node 2, node 3"), else how many ("2 nodes").
  std::string missing() const;

  // Once enough(): the first round, of every node that joined. The store host
  // is node 0 unless another node claimed 0; other automatic ranks are the
  // lowest free ones, in arrival order; then ranks are made contiguous, in
  // that order (a fixed-size job's are already).
  RoundAssignment plan(const std::string& worker_addr, int worker_port);

  // --- elastic rounds, after plan() ---------------------------------------------
  int members() const { return static_cast<int>(m_members.size()); }
  // The join record of the current round's node `node_rank`.
  const JoinRecord& member(int node_rank) const {
    return m_members.at(static_cast<size_t>(node_rank));
  }
  const std::vector<JoinRecord>& waiting() const { return m_waiting; }
  // Waiting nodes, and room for them.
  bool can_grow() const { return !m_waiting.empty() && members() < max_nodes(); }
  // The members that remain once `gone` (node ranks of the round that ended)
  // leave: as many as the next round would have before it admits anyone.
  int remaining(const std::set<int>& gone) const;
  // The next round: the members but `gone`, in their order, each gone one's
  // place taken by the next waiting node (a spare, in arrival order, but
  // those in `left`, arrivals that went away), so that the members keep
  // their ranks; then waiting nodes up to MAX; node ranks contiguous again.
  RoundAssignment next_round(const std::set<int>& gone, const std::set<int>& left,
                             const std::string& worker_addr, int worker_port);
  // The arrivals still waiting, forgotten: the job ends without them.
  std::vector<int> drop_waiting();

 private:
  // Any disagreement between `record` and the job.
  std::optional<Refusal> check(const JoinRecord& record) const;
  RoundAssignment plan_of(std::vector<JoinRecord> members, const std::string& worker_addr,
                          int worker_port);

  JoinRecord m_expected;
  std::vector<JoinRecord> m_joined;  // before plan()
  // The node ranks given by hand among them: where in m_joined (a lookup
  // per join, not a pass over every node that joined before).
  std::unordered_map<int, size_t> m_claimed;
  bool m_planned = false;
  std::vector<JoinRecord> m_members;  // the current round's, by node rank
  std::vector<JoinRecord> m_waiting;  // joined since, in arrival order
};

}  // namespace ddplaunch
