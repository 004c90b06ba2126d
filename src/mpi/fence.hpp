// FenceExchange: a PMIx fence across nodes, as an allgather through the job's
// store. Each node's server hands in its local ranks' combined data; this
// node writes it as one record and counts itself in (ADD). The node that
// completes the count reads every record once (one MULTI_GET), writes their
// concatenation in node order in parts of at most one value, and then the
// fence's "done" key with the number of parts. Every node waits for that
// key (parked on the server, never polled), then reads the parts (one MULTI_GET).
// Per node: six requests whatever the node count (three more for the last
// to arrive, four for the last to be done); at the store, about 3N values
// read per fence, not N * N. Once every node has read the result, the
// fence's keys are deleted (release()): the store does not grow with fences.
// Driven by the thread that drives the connection; not thread-safe.
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
  enum class Outcome {
    k_ok,         // `data`: every participant's, in node order
    k_failed,     // a record was missing, the data too large, or the round ended first
    k_timed_out,  // the fence's timeout passed before every node was in
  };
  // `data` is empty unless the outcome is k_ok.
  using Done = std::function<void(Outcome outcome, std::string data)>;

  // `connection` must outlive this object.
  explicit FenceExchange(StoreConnection& connection) : m_connection(connection) {}

  // One fence of `nspace` among `nodes` (sorted node ranks, `self` among
  // them: this node's rank in the round, as rendezvous assigned it):
  // `signature` names the participant set, the same on every node. Fences
  // with one signature complete in the order they are entered. `timeout`
  // (PMIX_TIMEOUT; 0: none) bounds the wait for the other nodes: past it,
  // this node's fence ends k_timed_out.
  void enter(const std::string& nspace, const std::string& signature, const std::vector<int>& nodes,
             int self, std::string data, Done done,
             StoreConnection::Duration timeout = StoreConnection::Duration(0));
  // The round is over: every fence still waiting ends (not ok), and so does
  // its request parked on the store (a restarted job would pile them up).
  void abandon();

 private:
  static void gather(StoreConnection& conn, const std::shared_ptr<FenceKeys>& keys);
  // This node (position `me` of `total`) is done with the fence's result,
  // which came in `parts` parts (0: the fence failed): its keys are deleted.
  static void release(StoreConnection& conn, const std::shared_ptr<FenceKeys>& keys, size_t me,
                      int64_t total, int parts);

  StoreConnection& m_connection;
  std::map<std::string, long> m_seq;  // by nspace + signature: fences entered so far
  std::set<std::string> m_waiting;    // the "done" keys of fences not yet complete
};

}  // namespace ddplaunch
