// NodeStore: this agent's side of the job's store. In a job of several
// nodes, node 0 hosts the store and every agent holds one connection to it,
// its link, its network preflight's probe, its links in the tree of agents
// and its `ddplaunch status` responder (node 0 also the live page's
// collector). A one-node job makes a
// connection to its workers' own store only once something uses that store
// (answer_locally()).
#pragma once

#include <memory>
#include <string>

#include "agent/agent_tree.hpp"
#include "agent/reach_probe.hpp"
#include "agent/stacks_room.hpp"
#include "agent/status_room.hpp"
#include "agent/status_tree.hpp"
#include "agent/tree_room.hpp"
#include "config/config.hpp"
#include "node/identity.hpp"
#include "posix/event_loop.hpp"
#include "rendezvous/status_collector.hpp"
#include "rendezvous/status_responder.hpp"
#include "rendezvous/store_link.hpp"
#include "store/async_client.hpp"
#include "store/client_on_loop.hpp"
#include "store/server.hpp"

namespace ddplaunch {

struct NodeStore {
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<AsyncClient> client;
  std::unique_ptr<ClientOnLoop> client_on_loop;  // the connection's socket on the loop
  std::unique_ptr<ReachProbe> probe;
  std::unique_ptr<StoreLink> link;
  std::unique_ptr<posix::TimedOwner<StoreLink>> link_timer;  // the link's timers on the loop
  std::unique_ptr<AgentTree> tree;             // this node's links in the tree of agents
  std::unique_ptr<TreeRoom> tree_room;         // the tree each round, the verdict down it
  std::unique_ptr<StatusTree> status;          // `ddplaunch status`'s requests
  std::unique_ptr<StatusResponder> stacks;     // `ddplaunch stacks`'
  std::unique_ptr<StatusCollector> collector;  // --metrics-port's page, on node 0
  StoreConnection::Duration beat{1000};        // --heartbeat-interval

  // Nothing for a one-node job. Each part registers itself on `loop`.
  NodeStore(const Config& config, const StoreAddress& address, Clock& clock, NodeIdentity& self,
            posix::EventLoop& loop);
  // A one-node job: the agent's own connection to its workers' store (on
  // `port`, with `token`), made when something first connects to that store
  // (a worker, or `ddplaunch status`), so that status requests reach this
  // agent too. A job nobody asks about and whose workers never use the
  // store never makes it.
  void answer_locally(int port, const std::string& token, StatusRoom& status_room,
                      StacksRoom& stacks_room, posix::EventLoop& loop);
  // `ddplaunch status` and `ddplaunch stacks` answered by their rooms
  // through the connection (`client`), from the agent's first round on
  // (TreeRoom and StatusTree observe the rounds, in that order: `observe`
  // is given them).
  void answer_requests(StatusRoom& status_room, StacksRoom& stacks_room,
                       const std::function<void(RoundObserver&)>& observe);
  // The connection first, so that node 0's store sees it close, not a
  // reset; node 0's store goes away only now.
  void close();
};

}  // namespace ddplaunch
