// DirectModex: one rank's published data fetched from the node that hosts
// it, without a fence (PMIx's "direct modex": Open MPI with
// pmix_base_async_modex, a PMIx_Get of a peer's key). Through the job's
// store: the asking node takes a slot in the target node's request queue
// (ADD), writes "<rank> <reply key>" there, and waits for the reply key
// (parked on the server); the target node watches its queue, slot by slot,
// once one of its workers joined, and writes each answer; the asking node
// waits at most its request's timeout. Driven by the
// thread that drives the connection; not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "store/connection.hpp"

namespace ddplaunch {

class DirectModex {
 public:
  // `ok` false: the target node's server had no data for that rank.
  using Reply = std::function<void(bool ok, std::string data)>;
  // How the serving node finds a local rank's data: it calls `answer` once.
  using Lookup = std::function<void(int rank, Reply answer)>;

  // `connection` must outlive this object.
  explicit DirectModex(StoreConnection& connection) : m_connection(connection) {}
  ~DirectModex();

  // Asks node `target` of `nspace` for `rank`'s data, for this node `self`
  // (its rank in the round, as rendezvous assigned it). No answer within
  // `timeout` (the target's worker never joined, its node never serves) is
  // no data, with a warning naming the rank and the node.
  void request(const std::string& nspace, int self, int target, int rank,
               StoreConnection::Duration timeout, Reply reply);
  // Answers the queue of `nspace`'s node `self` (this node's rank in the
  // round) with `lookup` from now on (a second call for the same namespace
  // does nothing).
  void serve(const std::string& nspace, int self, Lookup lookup);
  // Stops serving: the request parked on the queue's next slot is released.
  void stop_serving();

 private:
  struct Serving;
  void watch(const std::shared_ptr<Serving>& serving);

  StoreConnection& m_connection;
  long m_replies = 0;  // reply keys made so far
  std::shared_ptr<Serving> m_serving;
};

}  // namespace ddplaunch
