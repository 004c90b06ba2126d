#include "rendezvous/status_responder.hpp"

#include <utility>

#include "log.hpp"
#include "store/value_parts.hpp"

namespace ddplaunch {

std::string RequestKeys::request(int64_t n) const {
  return m_prefix + "/" + std::to_string(n);
}

std::string RequestKeys::answer(int64_t n, int node_rank) const {
  return request(n) + "/" + std::to_string(node_rank);
}

StatusResponder::StatusResponder(StoreConnection& store, RequestKeys keys, Answer answer)
    : m_store(store), m_keys(std::move(keys)), m_answer(std::move(answer)) {}

void StatusResponder::start(int node_rank) {
  m_node_rank = node_rank;
  if (!m_started) {
    m_started = true;
    resync();
  }
}

void StatusResponder::stop() {
  m_started = false;
  m_alive = std::make_shared<bool>(true);  // what is in flight is dropped
}

// The counter is the last request made: it is answered if it is still
// there (a command waits for it: the responder started after it was made),
// and the next one is awaited.
void StatusResponder::resync() {
  if (m_store.failed()) {
    return;
  }
  std::weak_ptr<bool> alive = m_alive;
  m_store.add(m_keys.seq(), 0, [this, alive](int64_t last) {
    if (alive.expired()) {
      return;
    }
    if (last <= 0) {
      await(last + 1);
      return;
    }
    m_store.get(m_keys.request(last), StoreConnection::Duration(1),
                [this, alive, last](std::optional<std::string> request) {
                  if (alive.expired()) {
                    return;
                  }
                  if (request) {
                    answer(last, *request);
                  }
                  await(last + 1);
                });
  });
}

void StatusResponder::answer(int64_t n, const std::string& request) {
  std::weak_ptr<bool> alive = m_alive;
  m_answer(request, [this, alive, n](const std::string& record) {
    if (alive.expired() || record.empty() || m_store.failed()) {
      return;
    }
    ++m_answered;
    value_parts::put(m_store, m_keys.answer(n, m_node_rank), record);
    log::debug("{} answered", m_keys.request(n));
  });
}

void StatusResponder::await(int64_t n) {
  if (m_store.failed()) {
    return;
  }
  const auto wait = std::chrono::duration_cast<StoreConnection::Duration>(k_repark);
  std::weak_ptr<bool> alive = m_alive;
  m_store.get(m_keys.request(n), wait, [this, alive, n](std::optional<std::string> request) {
    if (alive.expired()) {
      return;
    }
    if (!request) {
      resync();  // none came in a while: one may have been made and taken back
      return;
    }
    answer(n, *request);
    await(n + 1);
  });
}

}  // namespace ddplaunch
