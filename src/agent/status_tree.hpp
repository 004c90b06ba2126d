// StatusTree: this node's side of `ddplaunch status` (docs/STATUS.md) in
// every round: in a job of at most --tree-fanout + 1 nodes every node answers
// on the job's store (StatusResponder); in a larger one, node 0 and its
// children do, and every other node answers on its parent's store in the
// tree of agents (AgentTree), an interior node with its subtree's answers
// gathered (rendezvous/status_relay.hpp), in the round's tree as TreeRoom
// began it (observed before this). A node whose link to its parent breaks
// answers on the job's store again, for its subtree, until the next round. Not thread-safe: the
// agent's loop drives it.
#pragma once

#include <memory>
#include <string>

#include "agent/agent_tree.hpp"
#include "agent/round_view.hpp"
#include "agent/status_room.hpp"
#include "agent/tree_room.hpp"
#include "rendezvous/status_responder.hpp"
#include "store/connection.hpp"

namespace ddplaunch {

class StatusTree : public RoundObserver {
 public:
  // `tree`: null where the job has no tree (a one-node job's own store).
  // All must outlive it.
  StatusTree(AgentTree* tree, StoreConnection& job, StatusRoom& room);
  // Answers on the job's store as node `node_rank` (a one-node job).
  void start(int node_rank) { m_job.start(node_rank); }

  // RoundObserver
  void on_joined(const Topology& topology, int node_rank, const RoundStart& round) override;

 private:
  void answer(const std::string& request, const StatusResponder::Reply& reply);
  void answer_on_job_store(const std::string& why);

  AgentTree* m_tree;
  StatusRoom& m_room;
  StatusResponder m_job;                       // on the job's store
  std::unique_ptr<StatusResponder> m_parents;  // on its parent's, this round
  RequestKeys m_round_keys{""};
  bool m_through_tree = false;  // this round's answers travel the tree
  bool m_on_job_store = false;  // its link to its parent broke this round
  int m_height = 0;
  std::shared_ptr<int> m_round = std::make_shared<int>(0);  // for the parent's link, once had
};

}  // namespace ddplaunch
