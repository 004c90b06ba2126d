#include "agent/status_tree.hpp"

#include "log.hpp"
#include "rendezvous/status_relay.hpp"
#include "status/status_codec.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {

StatusTree::StatusTree(AgentTree* tree, StoreConnection& job, StatusRoom& room)
    : m_tree(tree),
      m_room(room),
      m_job(job, k_status_keys,
            [this](const std::string& request, const StatusResponder::Reply& reply) {
              answer(request, reply);
            }) {
  if (m_tree != nullptr) {
    m_tree->also_on_lost([this](const std::string& why) { answer_on_job_store(why); });
  }
}

// A node whose link to its parent broke (or never came) answers on node 0's
// store, for its subtree, until the next round: the command reads the
// answers there of the nodes its children's answers left out.
void StatusTree::answer_on_job_store(const std::string& why) {
  if (!m_through_tree || m_tree->place().parent <= 0 || m_on_job_store) {
    return;
  }
  m_on_job_store = true;
  m_parents.reset();
  m_job.start(m_tree->place().node);
  log::info("status: node {} answers on node 0's store this round: {}", m_tree->place().node, why);
}

void StatusTree::on_joined(const Topology& topology, int node_rank, const RoundStart& round) {
  const int nnodes = topology.nnodes();
  const int fanout = topology.tree_fanout;
  m_through_tree = m_tree != nullptr && tree_has_interior_nodes(nnodes, fanout);
  m_parents.reset();
  m_on_job_store = false;
  *m_round += 1;
  if (!m_through_tree) {
    m_job.start(node_rank);
    return;
  }
  m_round_keys = tree_status_keys(tree_round_name(round));
  m_height = tree_height(nnodes, fanout);
  const TreePlace& place = m_tree->place();
  if (place.parent <= 0) {
    m_job.start(node_rank);
    return;
  }
  m_job.stop();
  std::weak_ptr<int> this_round = m_round;
  const int now = *m_round;
  m_tree->up([this, this_round, now, node_rank](StoreConnection* up, const std::string& why) {
    if (this_round.expired() || *this_round.lock() != now) {
      return;
    }
    if (up == nullptr) {
      answer_on_job_store(why);
      return;
    }
    m_parents = std::make_unique<StatusResponder>(
        *up, m_round_keys, [this](const std::string& request, const StatusResponder::Reply& reply) {
          answer(request, reply);
        });
    m_parents->start(node_rank);
  });
}

void StatusTree::answer(const std::string& request, const StatusResponder::Reply& reply) {
  std::string own = m_room.answer_text(request);
  if (!m_through_tree) {
    reply(own);
    return;
  }
  // Through the tree every node answers, if only with an empty line: its
  // parent, or the command, waits for each child.
  if (own.empty()) {
    own.push_back('\n');
  }
  const TreePlace& place = m_tree->place();
  StoreConnection* down = place.parent >= 0 ? m_tree->down() : nullptr;
  if (down == nullptr) {
    reply(own);  // node 0 (the command reads its children), or a leaf
    return;
  }
  const auto asked = decode_status_request(request);
  const double timeout_s = asked ? asked->timeout_s : StatusRequest().timeout_s;
  relay_status(*down, m_round_keys, request, place.children,
               gather_time(timeout_s, place.depth, m_height),
               [reply, own = std::move(own)](const std::string& theirs) {
                 reply(join_answers(own, {theirs}));
               });
}

}  // namespace ddplaunch
