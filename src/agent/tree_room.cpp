#include "agent/tree_room.hpp"

#include "log.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"
#include "store/protocol.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {

std::string tree_round_name(const RoundStart& round) {
  return "round" + std::to_string(round.round) + "." + std::to_string(round.restarts);
}

TreeRoom::TreeRoom(AgentTree& tree, StoreLink& link, StoreConnection::Duration beat)
    : m_tree(tree), m_link(link), m_beat(std::max(beat, StoreConnection::Duration(1))) {
  m_tree.also_on_lost([this](const std::string&) {
    if (m_through_tree && m_tree.place().parent > 0) {
      m_link.watch_store();  // node 0's store has the verdict too
      m_link.beat_on(nullptr);
    }
  });
}

// The preflight's reports up the tree: the round's tree begun now, not
// once the preflight passed (on_joined() finds it begun).
void TreeRoom::on_preflight_start(const Topology& topology, int node_rank,
                                  const RoundStart& round) {
  const int nnodes = topology.nnodes();
  const int fanout = topology.tree_fanout;
  if (!tree_has_interior_nodes(nnodes, fanout)) {
    return;
  }
  m_tree.begin_round(tree_round_name(round), node_rank, nnodes, fanout);
  const TreePlace& place = m_tree.place();
  m_link.preflight_through_tree(place, tree_height(nnodes, fanout),
                                place.parent < 0 ? nullptr : m_tree.down());
  if (place.parent <= 0) {
    return;  // node 0's children report on the job's store
  }
  const int generation = ++*m_generation;
  m_tree.up([this, generation](StoreConnection* up, const std::string&) {
    if (generation == *m_generation) {
      m_link.report_to(up);
    }
  });
}

void TreeRoom::on_joined(const Topology& topology, int node_rank, const RoundStart& round) {
  const int nnodes = topology.nnodes();
  const int fanout = topology.tree_fanout;
  m_tree.begin_round(tree_round_name(round), node_rank, nnodes, fanout);
  m_through_tree = tree_has_interior_nodes(nnodes, fanout);
  m_round = round.round;
  const int generation = ++*m_generation;
  if (!m_through_tree) {
    return;
  }
  const TreePlace& place = m_tree.place();
  if (!place.children.empty()) {
    // Node 0 watches its children's heartbeats on its store and counts the
    // others' starts; an interior node watches its children's on its own
    // store (on the job's where it could open none: they beat there).
    const int counted = place.parent < 0 ? nnodes - 1 - static_cast<int>(place.children.size()) : 0;
    m_link.watch_beats(place.parent < 0 ? nullptr : m_tree.down(), place.children, counted);
  }
  if (place.parent <= 0) {
    return;  // node 0 and its children read the verdict on the job's store
  }
  m_link.beat_up_the_tree();
  m_tree.up([this, generation, r = round.round](StoreConnection* up, const std::string&) {
    if (generation != *m_generation) {
      return;
    }
    m_link.beat_on(up);
    if (up == nullptr) {
      return;  // no parent's store: the job's, as in a small job
    }
    watch_parent(*up, r, generation);
    // Its read on node 0's store is taken back once the parent's store has
    // answered (a link still connecting, or one a firewall drops, would
    // leave the verdict unread until the link failed).
    std::weak_ptr<int> alive = m_generation;
    up->request(protocol::request::ping(), StoreConnection::Duration(0),
                [this, alive, generation, r](const protocol::Reply&) {
                  const auto g = alive.lock();
                  if (!g || *g != generation) {
                    return;
                  }
                  m_link.watch_elsewhere();
                  log::debug("tree: node {} reads the verdict of round {} on its parent's store",
                             m_tree.place().node, r);
                });
  });
}

void TreeRoom::watch_parent(StoreConnection& up, int round, int generation) {
  std::weak_ptr<int> alive = m_generation;
  up.get(keys::stop(round), m_beat,
         [this, &up, alive, round, generation](std::optional<std::string> text) {
           const auto g = alive.lock();
           if (!g || *g != generation) {
             return;  // a round before (its link is closed at the next round's start)
           }
           if (text) {
             m_link.verdict_read(round, *text);
           } else {
             watch_parent(up, round, generation);
           }
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
