// StatusResponder: an agent's side of `ddplaunch status` (docs/PROTOCOL.md,
// "Status keys"). Nothing is published until someone asks: the agent parks
// one GET of the next request's key, status/<n>, on its store connection;
// `ddplaunch status` takes n from the counter status/seq and writes that
// key, which wakes every agent at once; each writes its answer (one JSON
// record, built by the `answer` function on the agent's thread) under
// status/<n>/<node rank> and parks the GET of request n+1. A request whose
// node filter leaves this node out gets no answer.
// Not thread-safe: the agent's loop drives the connection.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "store/connection.hpp"

namespace ddplaunch {

namespace status_keys {
inline constexpr const char* k_seq = "status/seq";
std::string request(int64_t n);                // status/<n>
std::string answer(int64_t n, int node_rank);  // status/<n>/<node rank>
}  // namespace status_keys

class StatusResponder {
 public:
  // The record for a request (its JSON text), or "" to give none.
  using Answer = std::function<std::string(const std::string& request)>;
  // How long a parked GET waits before the responder reads the counter
  // again (a request it missed while it was not parked: a later one).
  static constexpr auto k_repark = std::chrono::minutes(5);

  // `store` must outlive the responder's use of it.
  StatusResponder(StoreConnection& store, Answer answer);
  // Answers as node `node_rank` from now on; the first call reads the
  // counter, answers the last request if it is still there (made before
  // this start), and parks the GET of the next one.
  void start(int node_rank);
  int answered() const { return m_answered; }

 private:
  void resync();
  void await(int64_t n);
  void answer(int64_t n, const std::string& request);

  StoreConnection& m_store;
  Answer m_answer;
  int m_node_rank = -1;
  bool m_started = false;
  int m_answered = 0;
};

}  // namespace ddplaunch
