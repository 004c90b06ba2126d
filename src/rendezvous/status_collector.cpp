#include "rendezvous/status_collector.hpp"

#include <utility>
#include <vector>

#include "rendezvous/status_responder.hpp"
#include "status/status_codec.hpp"

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

void StatusCollector::collect(int64_t n, int nnodes) {
  std::vector<std::string> keys;
  std::vector<int> asked;
  for (int r = 0; r < nnodes; ++r) {
    keys.push_back(k_status_keys.answer(n, r));
    asked.push_back(r);
  }
  m_store.wait(keys, m_timeout, [this, n, keys, asked](bool) {
    m_store.multi_get(keys, [this, n, keys, asked](std::vector<std::optional<std::string>> got) {
      m_last = encode_status_document(
          merge_status(n, asked, decode_answers(std::move(got)), std::nullopt));
      m_last_at = m_clock.now();
      m_in_flight = false;
      for (const auto& key : keys) {
        m_store.erase(key, [] {});
      }
      m_store.erase(k_status_keys.request(n), [] {});
    });
  });
}

}  // namespace ddplaunch
