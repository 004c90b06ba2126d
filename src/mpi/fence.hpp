// FenceExchange: a PMIx fence across nodes, as an allgather through the job's
// store. Each node's server hands in its local ranks' combined data; this
// node writes it as one record and counts itself in (ADD). The node that
// completes the count reads every record once (one MULTI_GET) and writes
// their concatenation in node order into the fence's "done" key (or, past
// one value's size, into parts that key names). Every node waits for that
// key (parked on the server, never polled) and gets the whole fence's data
// with it. Per node: three requests whatever the node count (one more for
// data in parts; three more for the last to arrive); at the store, 2N reads
// per fence, not N * N. Driven by the thread that drives the connection;
// not thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "mpi/pmix_job.hpp"
#include "store/connection.hpp"

namespace ddplaunch {

class FenceExchange {
 public:
  // `ok` false: a record was missing (the store lost data); `data` is then empty.
  using Done = std::function<void(bool ok, std::string data)>;

  // `connection` must outlive this object.
  explicit FenceExchange(StoreConnection& connection) : m_connection(connection) {}

  // One fence of `nspace` among `nodes` (sorted node ranks, `self` among
  // them: this node's rank in the round, as rendezvous assigned it):
  // `signature` names the participant set, the same on every node. Fences
  // with one signature complete in the order they are entered.
  void enter(const std::string& nspace, const std::string& signature, const std::vector<int>& nodes,
             int self, std::string data, Done done);
  // The round is over: every fence still waiting ends (not ok), and so does
  // its request parked on the store (a restarted job would pile them up).
  void abandon();

 private:
  static void gather(StoreConnection& conn, const std::shared_ptr<FenceKeys>& keys);

  StoreConnection& m_connection;
  std::map<std::string, long> m_seq;  // by nspace + signature: fences entered so far
  std::set<std::string> m_waiting;    // the "done" keys of fences not yet complete
};

}  // namespace ddplaunch
