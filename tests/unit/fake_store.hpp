// An in-memory store for the unit tests of what talks to one: the real
// KvCore behind fake connections whose replies the test delivers (or holds
// back), with a clock moved by hand. No socket, no thread, no sleep.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "posix/clock.hpp"
#include "store/connection.hpp"
#include "store/kv_core.hpp"
#include "store/protocol.hpp"

namespace ddplaunch::testing_store {

struct FakeClock : Clock {
  TimePoint t{std::chrono::seconds(1000)};
  TimePoint now() const override { return t; }
  double wall_now() const override { return 0; }
};

class FakeConnection;

// The store: one KvCore; every reply goes to its connection's inbox.
struct FakeStore {
  KvCore core;
  FakeClock& clock;
  std::map<int, FakeConnection*> conns;
  int next_client = 1;
  explicit FakeStore(FakeClock& c) : clock(c) {}
  void route(std::vector<KvCore::Out> out);
  std::optional<std::string> value(const std::string& key) const {
    const std::string* v = core.find(key);
    return v != nullptr ? std::optional(*v) : std::nullopt;
  }
};

class FakeConnection : public StoreConnection {
 public:
  explicit FakeConnection(FakeStore& store) : m_store(store), m_client(store.next_client++) {
    store.conns[m_client] = this;
  }
  ~FakeConnection() override { m_store.conns.erase(m_client); }

  void set_failure_handler(FailureHandler handler) override { m_handler = std::move(handler); }
  bool failed() const override { return m_failed; }
  const Error& last_error() const override { return m_error; }
  bool connecting() const override { return false; }
  int attempts() const override { return 1; }
  bool idle() const override { return m_pending.empty(); }
  // A new client of the same store: what the old one asked is forgotten.
  void reconnect(Duration) override {
    m_store.conns.erase(m_client);
    m_client = m_store.next_client++;
    m_store.conns[m_client] = this;
    m_failed = false;
    m_error = Error{};
    m_pending.clear();
    m_inbox.clear();
    ++reconnects;
  }

  void request(std::string frame, Duration, Callback callback) override {
    if (m_failed) {
      return;
    }
    ++requests;
    const auto r = protocol::decode_request(std::string_view(frame).substr(4));
    values_read += r.op == protocol::Op::k_multi_get ? static_cast<int>(r.keys.size())
                   : r.op == protocol::Op::k_get     ? 1
                                                     : 0;
    const uint32_t id = m_next_id++;
    protocol::set_request_id(frame, id);
    m_pending[id] = std::move(callback);
    m_store.route(m_store.core.apply(m_client,
                                     protocol::decode_request(std::string_view(frame).substr(4)),
                                     m_store.clock.now()));
  }

  // --- the test's handles ---------------------------------------------------
  int requests = 0;     // made so far
  int values_read = 0;  // keys its GETs and MULTI_GETs asked for
  int reconnects = 0;   // reconnect() calls
  void receive(std::string frame) { m_inbox.push_back(std::move(frame)); }
  // Replies wait in the inbox while held.
  void hold(bool held) { m_held = held; }
  // Hands over one waiting reply; false when none (or held).
  bool deliver_one() {
    if (m_held || m_inbox.empty() || m_failed) {
      return false;
    }
    const std::string frame = std::move(m_inbox.front());
    m_inbox.pop_front();
    const auto reply = protocol::parse_reply(std::string_view(frame).substr(4));
    auto it = m_pending.find(reply.id);
    if (it == m_pending.end()) {
      return true;
    }
    Callback callback = std::move(it->second);
    m_pending.erase(it);
    if (reply.status == protocol::Status::k_error) {
      fail(Failure::k_rejected, "refused the request: " + protocol::error_message(reply));
    } else {
      callback(reply);
    }
    return true;
  }
  // The connection ends: the store sees it close (its ON_CLOSE word), this
  // side is told `kind`.
  void fail(Failure kind, const std::string& why) {
    if (m_failed) {
      return;
    }
    m_failed = true;
    m_error = Error{kind, why};
    m_pending.clear();
    m_inbox.clear();
    m_store.route(m_store.core.close(m_client));
    if (m_handler) {
      m_handler(m_error);
    }
  }

 private:
  FakeStore& m_store;
  int m_client;
  FailureHandler m_handler;
  bool m_failed = false;
  Error m_error;
  bool m_held = false;
  uint32_t m_next_id = 1;
  std::map<uint32_t, Callback> m_pending;
  std::deque<std::string> m_inbox;
};

inline void FakeStore::route(std::vector<KvCore::Out> out) {
  for (auto& o : out) {
    if (auto it = conns.find(o.client); it != conns.end()) {
      it->second->receive(std::move(o.frame));
    }
  }
}

}  // namespace ddplaunch::testing_store
