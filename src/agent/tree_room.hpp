// TreeRoom: the tree of agents (AgentTree) begun for each round when its
// nodes have met, and the round's verdict down it (docs/PROTOCOL.md, "The
// verdict down the tree"): past --tree-fanout + 1 nodes, a node below node
// 0's children reads the verdict on its parent's store and takes back its
// GET of it on the job's store, so that a verdict wakes node 0's children
// alone there; an interior node writes each verdict it hears on its own
// store for its children. A node whose link to its parent breaks reads the
// verdict on the job's store again; its read on the parent's store is made
// again each heartbeat interval, so that a frozen parent (whose last word
// never comes) fails the link within the heartbeat timeout, as it fails its
// heartbeats. Heartbeats go up the same tree (docs/PROTOCOL.md,
// "Heartbeats up the tree"): a node below node 0's children beats on its
// parent's store, and each parent watches its children's (node 0 only its
// own children's). So do the network preflight's reports, the tree begun
// when the preflight starts: each interior node gathers its children's and
// reports them with its own. Not thread-safe: the agent's loop drives it.
#pragma once

#include <memory>
#include <string>

#include "agent/agent_tree.hpp"
#include "agent/round_view.hpp"
#include "rendezvous/store_link.hpp"

namespace ddplaunch {

// The tree's name for a round: its number and its restarts ("round3.1").
std::string tree_round_name(const RoundStart& round);

class TreeRoom : public RoundObserver {
 public:
  // Both must outlive it. `beat`: how long a read of the verdict on the
  // parent's store waits before it is made again (--heartbeat-interval), so
  // that a parent that froze fails the link within the heartbeat timeout.
  TreeRoom(AgentTree& tree, StoreLink& link, StoreConnection::Duration beat);

  // RoundObserver
  void on_preflight_start(const Topology& topology, int node_rank,
                          const RoundStart& round) override;
  void on_joined(const Topology& topology, int node_rank, const RoundStart& round) override;
  void on_verdict(const JobVerdict& verdict) override;

 private:
  void watch_parent(StoreConnection& up, int round, int generation);

  AgentTree& m_tree;
  StoreLink& m_link;
  StoreConnection::Duration m_beat;
  bool m_through_tree = false;  // this round's verdict travels the tree
  int m_round = -1;
  std::shared_ptr<int> m_generation = std::make_shared<int>(0);  // for callbacks of a round before
};

}  // namespace ddplaunch
