// TreeFence: a PMIx fence among every node of a round through the tree of
// agents (topology/tree.hpp), not through node 0's store alone. A node waits
// for its children's records on its own store (TreeLinks::down()), puts its
// own data before theirs (a subtree is a run of node ranks: the whole is in
// node order) and writes that once as its record on its parent's store
// (TreeLinks::up()). The root's gathered data is the result: it writes it
// on its own store, where its children read it and write it on theirs, and
// so on down. Each link carries its subtree's data once up and the result
// once down: node 0 sends the result to its F children, not to N nodes.
// A failure anywhere (a lost link, a timeout below, data over the limit)
// travels as a failed record up and a failed result down, with its reason,
// so that every node's fence ends naming it. Keys (docs/PROTOCOL.md), on the
// store of the node whose children use them: tree/<nspace>/<set>/<seq>/up/<child>,
// .../down, .../read, and their parts (/<i>) where a value is over 1 MiB;
// the last child to read the result deletes them. Not thread-safe: the
// loop's thread drives it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "mpi/fence.hpp"
#include "store/connection.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {

// One node's place in the tree for a round and its connections to the two
// stores its fences use. AgentTree is the real one (sockets on the loop);
// the unit tests use connections to in-memory stores.
class TreeLinks {
 public:
  using Ready = std::function<void(StoreConnection* up, const std::string& why)>;
  using Lost = std::function<void(const std::string& why)>;
  virtual ~TreeLinks() = default;
  // Node `node_rank` of `nnodes` in the round whose PMIx namespace is
  // `nspace`, with `fanout` (the plan's): the links of a round before are
  // dropped. Nothing is done for the round already begun.
  virtual void begin(const std::string& nspace, int node_rank, int nnodes, int fanout) = 0;
  // This node's place in the round begun.
  virtual const TreePlace& place() const = 0;
  // The store this node's children write to (node 0's: the job's store);
  // null for a leaf.
  virtual StoreConnection* down() = 0;
  // Hands over the connection to the parent's store once it can be had
  // (the parent publishes its address when it begins the round), or null
  // and why not. Not called for the root.
  virtual void up(Ready ready) = 0;
  // Told, with a line naming the node, when a connection this node's
  // fences use fails: to its parent's store or to its own.
  virtual void on_lost(Lost lost) = 0;
};

class TreeFence {
 public:
  using Outcome = FenceExchange::Outcome;
  using Done = FenceExchange::Done;

  // `links` must outlive it.
  explicit TreeFence(TreeLinks& links);
  ~TreeFence();  // fences still waiting never hear back
  TreeFence(const TreeFence&) = delete;
  TreeFence& operator=(const TreeFence&) = delete;

  // One fence of every node of the round `nspace` (this node is `self` of
  // `nnodes`, the tree's fan-out `fanout`): `done` gets every node's data
  // in node order. `signature` names the ranks' set (mpi/fence.hpp), the
  // same on every node: fences of one set complete in the order entered.
  // `timeout` (PMIX_TIMEOUT; 0: none) bounds this node's wait.
  void enter(const std::string& nspace, const std::string& signature, int self, int nnodes,
             int fanout, std::string data, Done done,
             StoreConnection::Duration timeout = StoreConnection::Duration(0));
  // The round is over: every fence still waiting ends (failed), and its
  // children are told.
  void abandon();

 private:
  struct Fence;
  using Shared = std::shared_ptr<Fence>;
  void gather(const Shared& f);
  void gathered(const Shared& f);
  void climb(const Shared& f, std::string subtree);
  void descend(const Shared& f, std::string result);
  static void release(const Shared& f, StoreConnection& up, int result_parts);
  void fail(const Shared& f, const std::string& why);
  void end(const Shared& f, Outcome outcome, std::string data);

  TreeLinks& m_links;
  std::map<std::string, long> m_seq;  // by nspace and signature: fences entered so far
  std::set<Shared> m_live;            // entered and not yet ended
};

}  // namespace ddplaunch
