#include "agent/tree_room.hpp"

#include "log.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"

namespace ddplaunch {

std::string tree_round_name(const RoundStart& round) {
  return "round" + std::to_string(round.round) + "." + std::to_string(round.restarts);
}

TreeRoom::TreeRoom(AgentTree& tree, StoreLink& link) : m_tree(tree), m_link(link) {
  m_tree.also_on_lost([this](const std::string&) {
    if (m_through_tree && m_tree.place().parent > 0) {
      m_link.watch_store();  // node 0's store has the verdict too
    }
  });
}

void TreeRoom::on_joined(const Topology& topology, int node_rank, const RoundStart& round) {
  const int nnodes = topology.nnodes();
  const int fanout = topology.tree_fanout;
  m_tree.begin_round(tree_round_name(round), node_rank, nnodes, fanout);
  m_through_tree = fanout >= 2 && nnodes > fanout + 1;
  m_round = round.round;
  const int generation = ++*m_generation;
  if (!m_through_tree || m_tree.place().parent <= 0) {
    return;  // node 0 and its children read the verdict on the job's store
  }
  std::weak_ptr<int> alive = m_generation;
  const auto current = [alive, generation] {
    const auto g = alive.lock();
    return g && *g == generation;
  };
  m_tree.up([this, current, r = round.round](StoreConnection* up, const std::string&) {
    if (!current() || up == nullptr) {
      return;  // no parent's store: the job's, as in a small job
    }
    up->get(keys::stop(r), StoreConnection::Duration(0),
            [this, current, r](std::optional<std::string> text) {
              if (current() && text) {
                m_link.verdict_read(r, *text);
              }
            });
    m_link.watch_elsewhere();
    log::debug("tree: node {} reads the verdict of round {} on its parent's store",
               m_tree.place().node, r);
  });
}

void TreeRoom::on_verdict(const JobVerdict& verdict) {
  const TreePlace& place = m_tree.place();
  if (!m_through_tree || place.parent < 0 || place.children.empty()) {
    return;
  }
  if (StoreConnection* down = m_tree.down(); down != nullptr) {
    down->set(keys::stop(m_round), encode_verdict(verdict), [] {});
    log::debug("tree: node {} hands the verdict of round {} to its {} children", place.node,
               m_round, place.children.size());
  }
}

}  // namespace ddplaunch
