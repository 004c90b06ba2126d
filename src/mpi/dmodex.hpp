// DirectModex: one rank's published data fetched from the node that hosts
// it, without a fence (PMIx's "direct modex": Open MPI with
// pmix_base_async_modex, a PMIx_Get of a peer's key). Through the job's
// store: the asking node takes a slot in the target node's request queue
// (ADD), writes "<rank> <reply key>" there, and waits for the reply key
// (parked on the server); the target node watches its queue, slot by slot,
// once one of its workers joined, and writes each answer. Driven by the
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

  // `connection` must outlive this object; `node_rank` is this node.
  DirectModex(StoreConnection& connection, int node_rank)
      : m_connection(connection), m_node_rank(node_rank) {}
  ~DirectModex();

  // Asks node `target` of `nspace` for `rank`'s data.
  void request(const std::string& nspace, int target, int rank, Reply reply);
  // Answers this node's queue of `nspace` with `lookup` from now on (a
  // second call for the same namespace does nothing).
  void serve(const std::string& nspace, Lookup lookup);
  // Stops serving: the request parked on the queue's next slot is released.
  void stop_serving();

 private:
  struct Serving;
  void watch(const std::shared_ptr<Serving>& serving);

  StoreConnection& m_connection;
  int m_node_rank;
  long m_replies = 0;  // reply keys made so far
  std::shared_ptr<Serving> m_serving;
};

}  // namespace ddplaunch
