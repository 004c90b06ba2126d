#include "rendezvous/status_collector.hpp"

#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "rendezvous/status_relay.hpp"
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
  // The request says how long this waits: the tree's interior nodes gather
  // for less.
  StatusRequest request;
  request.timeout_s = std::chrono::duration<double>(m_timeout).count();
  m_store.add(
      k_status_keys.seq(), 1, [this, nnodes, text = encode_status_request(request)](int64_t n) {
        m_store.set(k_status_keys.request(n), text, [this, n, nnodes] { collect(n, nnodes); });
      });
}

// Node 0's answer first: it says whether the others' travel the tree of
// agents or come from every node.
void StatusCollector::collect(int64_t n, int nnodes) {
  const std::string first = k_status_keys.answer(n, 0);
  m_store.wait({first}, m_timeout, [this, n, nnodes, first](bool) {
    m_store.get(first, Duration(1), [this, n, nnodes](std::optional<std::string> node0) {
      std::optional<NodeStatus> status = node0 ? decode_node_status(*node0) : std::nullopt;
      const int fanout = status && status->job ? status->job->tree_fanout : 0;
      if (tree_has_interior_nodes(nnodes, fanout)) {
        collect_through_tree(n, nnodes, fanout, std::move(status));
        return;
      }
      std::vector<int> asked;
      std::vector<std::string> keys;
      for (int r = 0; r < nnodes; ++r) {
        asked.push_back(r);
        keys.push_back(k_status_keys.answer(n, r));
      }
      m_store.wait(keys, m_timeout, [this, n, keys, asked](bool) {
        m_store.multi_get(
            keys, [this, n, keys, asked](std::vector<std::optional<std::string>> got) {
              done(n, merge_status(n, asked, decode_answers(std::move(got)), std::nullopt), keys);
            });
      });
    });
  });
}

// Node 0's children answer for their subtrees; a node whose link to its
// parent broke answers on node 0's store for its own: every answer under
// status/<n>/ is read, each placed by the run of nodes it stands for.
void StatusCollector::collect_through_tree(int64_t n, int nnodes, int fanout,
                                           std::optional<NodeStatus> node0) {
  std::vector<std::string> children;
  for (const int c : tree_place(0, nnodes, fanout).children) {
    children.push_back(k_status_keys.answer(n, c));
  }
  const std::string under = k_status_keys.request(n) + "/";
  auto placed = std::make_shared<std::vector<std::optional<NodeStatus>>>(nnodes);
  (*placed)[0] = std::move(node0);
  m_store.wait(children, m_timeout, [this, n, nnodes, fanout, under, placed](bool) {
    m_store.keys(under, [this, n, nnodes, fanout, under, placed](std::vector<std::string> present) {
      std::vector<std::string> answers;
      std::vector<int> first;
      for (const std::string& key : present) {
        if (const auto node = subtree_answer_of(key, under, nnodes)) {
          answers.push_back(key);
          first.push_back(*node);
        }
      }
      value_parts::get_all(
          m_store, answers,
          [this, n, nnodes, fanout, present, first, placed](
              std::vector<std::optional<std::string>> got, std::vector<std::string>) {
            std::vector<int> index(static_cast<size_t>(nnodes));
            std::iota(index.begin(), index.end(), 0);
            for (size_t i = 0; i < got.size(); ++i) {
              if (got[i]) {
                place_subtree(*got[i], first[i], nnodes, fanout, index, *placed);
              }
            }
            std::vector<int> asked(static_cast<size_t>(nnodes));
            std::iota(asked.begin(), asked.end(), 0);
            std::vector<std::string> keys = present;
            keys.push_back(k_status_keys.answer(n, 0));
            done(n, merge_status(n, asked, std::move(*placed), std::nullopt), keys);
          });
    });
  });
}

void StatusCollector::done(int64_t n, const StatusDocument& doc,
                           const std::vector<std::string>& keys) {
  m_last = encode_status_document(doc);
  m_last_at = m_clock.now();
  m_in_flight = false;
  for (const auto& key : keys) {
    m_store.erase(key, [] {});
  }
  m_store.erase(k_status_keys.request(n), [] {});
}

}  // namespace ddplaunch
