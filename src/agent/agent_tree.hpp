// AgentTree: this agent's links in the tree of agents (topology/tree.hpp),
// which the PMIx fences across every node of a round, its verdict and
// `ddplaunch status` travel, and its heartbeats and the first round's
// network preflight reports go up. Each round's tree is begun when its
// nodes meet, or when the preflight starts (TreeRoom); a fence finds it
// begun. An interior node keeps a store of its
// own for its children: a StoreServer with the job's token, so that its
// links are authenticated, sealed and bounded exactly as the job's store's
// connections are, bound to every address as the network preflight's
// listener is; it holds one connection to it and one to its parent's, both
// on the loop. Node 0's children use the job's store, and node 0 its own
// connection to it. An interior node publishes its store's address in the
// job's store at tree/<round>/addr/<node rank> when it begins a round; a
// child reads its parent's there (one parked GET). A job of at most
// fan-out + 1 nodes starts no server and opens no connection. Not
// thread-safe: the loop's thread owns it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "mpi/tree_fence.hpp"
#include "posix/event_loop.hpp"
#include "store/async_client.hpp"
#include "store/client_on_loop.hpp"
#include "store/server.hpp"

namespace ddplaunch {

class AgentTree : public TreeLinks {
 public:
  // `job_store`: this agent's connection to the job's store; `addr`: the
  // address this node advertises (its peers reach it there); `token`: the
  // job's (empty: none, as the job's store). All but `token` and `addr`
  // must outlive it.
  AgentTree(const Config& config, std::string token, std::string addr, StoreConnection& job_store,
            posix::EventLoop& loop);
  ~AgentTree() override;
  AgentTree(const AgentTree&) = delete;
  AgentTree& operator=(const AgentTree&) = delete;

  // A fence's: nothing where begin_round() began the round already.
  void begin(const std::string& nspace, int node_rank, int nnodes, int fanout) override;
  // The round named `round` (its nodes have met), for its fences and its
  // status requests alike.
  void begin_round(const std::string& round, int node_rank, int nnodes, int fanout);
  const TreePlace& place() const override { return m_place; }
  StoreConnection* down() override;
  void up(Ready ready) override;
  void on_lost(Lost lost) override { m_lost = std::move(lost); }
  // Told too when a link fails (TreeRoom), after the fences.
  void also_on_lost(Lost lost) { m_also_lost.push_back(std::move(lost)); }

  // The port of this node's own store for its children (0: none yet).
  int port() const { return m_server ? m_server->port() : 0; }

 private:
  void start(const std::string& nspace, int node_rank, int nnodes, int fanout);
  std::string addr_key(int node) const;
  void open_store();
  void parent_found(const std::string& endpoint);
  void lost(const std::string& why);
  std::unique_ptr<AsyncClient> connect(const std::string& host, int port);

  const Config& m_config;
  std::string m_token;
  std::string m_addr;
  StoreConnection& m_job;
  posix::EventLoop& m_loop;
  std::string m_nspace;
  TreePlace m_place;
  std::unique_ptr<StoreServer> m_server;  // an interior node's, from its first round as one
  std::string m_server_error;             // why it has none
  std::unique_ptr<AsyncClient> m_down;    // to m_server
  std::unique_ptr<ClientOnLoop> m_down_on_loop;
  std::unique_ptr<AsyncClient> m_up;  // to its parent's store (not node 0's)
  std::unique_ptr<ClientOnLoop> m_up_on_loop;
  std::string m_parent_where;  // "node P (addr:port)"
  std::string m_up_error;      // why there is no connection to the parent
  std::vector<Ready> m_waiting;
  // The links of the round before: closed at the next round's start, never
  // from inside one of their own callbacks.
  std::unique_ptr<ClientOnLoop> m_old_on_loop;
  std::unique_ptr<AsyncClient> m_old;
  std::string m_published;      // this node's address key in the job's store
  bool m_parent_asked = false;  // a GET of the parent's address is parked
  bool m_rounds_begun = false;  // begin_round() begins each round
  Lost m_lost;
  std::vector<Lost> m_also_lost;
};

}  // namespace ddplaunch
