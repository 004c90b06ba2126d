#include "rendezvous/status_collector.hpp"

#include <numeric>
#include <utility>
#include <vector>

#include "rendezvous/status_responder.hpp"
#include "status/status_codec.hpp"
#include "store/value_parts.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {

StatusCollector::StatusCollector(StoreConnection& store, const Clock& clock,
                                 std::function<int()> nnodes, Duration fresh, Duration timeout)
    : m_store(store),
      m_clock(clock),
      m_nnodes(std::move(nnodes)),
      m_fresh(fresh),
      m_timeout(timeout) {}

void StatusCollector::refresh() {
  if (m_in_flight || m_store.failed() || (m_last_at && m_clock.now() - *m_last_at < m_fresh)) {
    return;
  }
  m_in_flight = true;
  const int nnodes = std::max(1, m_nnodes());
  m_store.add(k_status_keys.seq(), 1, [this, nnodes](int64_t n) {
    m_store.set(k_status_keys.request(n), "{}", [this, n, nnodes] { collect(n, nnodes); });
  });
}

// Node 0's answer first: it says whether the others' travel the tree of
// agents (node 0's children answering for their subtrees) or come from
// every node.
void StatusCollector::collect(int64_t n, int nnodes) {
  const std::string first = k_status_keys.answer(n, 0);
  m_store.wait({first}, m_timeout, [this, n, nnodes, first](bool) {
    m_store.get(first, Duration(1), [this, n, nnodes](std::optional<std::string> node0) {
      std::optional<NodeStatus> status = node0 ? decode_node_status(*node0) : std::nullopt;
      const int fanout = status && status->job ? status->job->tree_fanout : 0;
      std::vector<int> asked;
      std::vector<std::string> keys;
      const bool through_tree = fanout >= 2 && nnodes > fanout + 1;
      for (int r = 0; r < nnodes; ++r) {
        asked.push_back(r);
      }
      keys.push_back(k_status_keys.answer(n, 0));
      for (const int c : through_tree ? tree_place(0, nnodes, fanout).children : asked) {
        if (c > 0) {
          keys.push_back(k_status_keys.answer(n, c));
        }
      }
      m_store.wait(keys, m_timeout, [this, n, nnodes, fanout, through_tree, keys, asked](bool) {
        value_parts::get_all(
            m_store, keys,
            [this, n, nnodes, fanout, through_tree, keys, asked](
                std::vector<std::optional<std::string>> got, std::vector<std::string> parts) {
              std::vector<std::optional<NodeStatus>> answers;
              if (through_tree) {
                std::vector<int> index(static_cast<size_t>(nnodes));
                std::iota(index.begin(), index.end(), 0);
                answers.resize(static_cast<size_t>(nnodes));
                answers[0] = got[0] ? decode_node_status(*got[0]) : std::nullopt;
                const std::vector<int> children = tree_place(0, nnodes, fanout).children;
                for (size_t i = 0; i < children.size(); ++i) {
                  const int c = children[i];
                  if (got[i + 1]) {
                    place_subtree_answer(*got[i + 1], c, c + tree_place(c, nnodes, fanout).subtree,
                                         index, answers);
                  }
                }
              } else {
                answers = decode_answers(std::move(got));
              }
              m_last =
                  encode_status_document(merge_status(n, asked, std::move(answers), std::nullopt));
              m_last_at = m_clock.now();
              m_in_flight = false;
              for (const auto& key : keys) {
                m_store.erase(key, [] {});
              }
              for (const auto& key : parts) {
                m_store.erase(key, [] {});
              }
              m_store.erase(k_status_keys.request(n), [] {});
            });
      });
    });
  });
}

}  // namespace ddplaunch
