// StatusResponder: an agent's side of `ddplaunch status` and `ddplaunch
// stacks` (docs/PROTOCOL.md, "Status keys"). Nothing is published until
// someone asks: the agent parks one GET of the next request's key,
// <prefix>/<n>, on its store connection; the command takes n from the
// counter <prefix>/seq and writes that key, which wakes every agent at once;
// each gives its answer (one JSON record, built by the `answer` function on
// the agent's thread, at once or later) under <prefix>/<n>/<node rank>, and
// parks the GET of request n+1 at once. A request whose node filter leaves
// this node out gets no answer. An answer over the store's largest value
// goes in parts (store/value_parts.hpp).
// Not thread-safe: the agent's loop drives the connection.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "store/connection.hpp"

namespace ddplaunch {

// The keys of one kind of request.
class RequestKeys {
 public:
  explicit RequestKeys(std::string prefix) : m_prefix(std::move(prefix)) {}
  std::string seq() const { return m_prefix + "/seq"; }
  std::string request(int64_t n) const;                // <prefix>/<n>
  std::string answer(int64_t n, int node_rank) const;  // <prefix>/<n>/<node rank>

 private:
  std::string m_prefix;
};

// `ddplaunch status`: the workers' credential may use these keys.
inline const RequestKeys k_status_keys{"status"};
// `ddplaunch stacks`: only the job's token (store/auth.cpp).
inline const RequestKeys k_stacks_keys{"stacks"};

class StatusResponder {
 public:
  // Gives this node's record ("": none) for the request; once, at once or
  // later on the agent's thread. A reply given after the responder is gone
  // is dropped.
  using Reply = std::function<void(const std::string& record)>;
  using Answer = std::function<void(const std::string& request, Reply reply)>;
  // How long a parked GET waits before the responder reads the counter
  // again (a request it missed while it was not parked: a later one).
  static constexpr auto k_repark = std::chrono::minutes(5);

  // `store` must outlive the responder's use of it.
  StatusResponder(StoreConnection& store, RequestKeys keys, Answer answer);
  // Answers as node `node_rank` from now on; the first call reads the
  // counter, answers the last request if it is still there (made before
  // this start), and parks the GET of the next one.
  void start(int node_rank);
  // Answers nothing more until started again: what it awaits is dropped.
  void stop();
  int answered() const { return m_answered; }

 private:
  void resync();
  void await(int64_t n);
  void answer(int64_t n, const std::string& request);

  StoreConnection& m_store;
  RequestKeys m_keys;
  Answer m_answer;
  int m_node_rank = -1;
  bool m_started = false;
  int m_answered = 0;
  std::shared_ptr<bool> m_alive = std::make_shared<bool>(true);  // for late replies
};

}  // namespace ddplaunch
