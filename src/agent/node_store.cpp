#include "agent/node_store.hpp"

#include <chrono>
#include <system_error>

#include "launcher/agent_channel.hpp"
#include "log.hpp"
#include "rendezvous/store_host.hpp"
#include "status/status_codec.hpp"

namespace ddplaunch {

namespace {

// How long node 0 keeps the store for the other nodes once its own run is
// over: each reads the job's verdict and leaves (a node that joined the
// next round just as node 0 was stopped would otherwise find the store gone
// and end with exit 4, not the verdict).
constexpr auto k_store_linger = std::chrono::seconds(1);

// The network preflight's probe, with this node's probe listener (on every
// address: peers dial the one gloo and NCCL will use) when --preflight asks
// for one; node 0's --preflight decides whether the job runs it.
std::unique_ptr<ReachProbe> open_probe(const Config& config, NodeIdentity& self,
                                       posix::EventLoop& loop) {
  auto probe = std::make_unique<ReachProbe>(loop);
  if (config.preflight) {
    try {
      self.probe_port = probe->listen_on();
    } catch (const std::system_error& e) {
      log::warn(
          "network preflight: no probe port here ({}); the other nodes do not probe this "
          "node",
          e.what());
    }
  }
  return probe;
}

}  // namespace

NodeStore::NodeStore(const Config& config, const StoreAddress& address, Clock& clock,
                     NodeIdentity& self, posix::EventLoop& loop) {
  if (config.nnodes <= 1) {
    return;
  }
  server = host_store(config, address);
  if (config.pick_store_port && server) {
    announce_store_port(address.port);
  }
  client =
      std::make_unique<AsyncClient>(address.host, address.port, millis(config.rdzv_timeout_s),
                                    millis(config.heartbeat_timeout_s), clock.now(), address.token);
  client_on_loop = std::make_unique<ClientOnLoop>(loop, *client);
  probe = open_probe(config, self, loop);
  link = make_store_link(config, address, *client, clock, server.get());
  link->set_probe(probe.get());
  link_timer = std::make_unique<posix::TimedOwner<StoreLink>>(loop, *link);
  tree = std::make_unique<AgentTree>(config, address.token, self.addr, *client, loop);
  beat = millis(config.heartbeat_interval_s);
}

void NodeStore::answer_locally(int port, const std::string& token, StatusRoom& status_room,
                               StacksRoom& stacks_room, posix::EventLoop& loop) {
  client = std::make_unique<AsyncClient>("127.0.0.1", port, std::chrono::seconds(10),
                                         std::chrono::seconds(30), std::chrono::steady_clock::now(),
                                         token);
  answer_requests(status_room, stacks_room, [](RoundObserver&) {});
  status->start(0);
  stacks->start(0);
  client_on_loop = std::make_unique<ClientOnLoop>(loop, *client);
}

void NodeStore::answer_requests(StatusRoom& status_room, StacksRoom& stacks_room,
                                const std::function<void(RoundObserver&)>& observe) {
  if (tree && link) {
    tree_room = std::make_unique<TreeRoom>(*tree, *link, beat);
    observe(*tree_room);
  }
  status = std::make_unique<StatusTree>(tree.get(), *client, status_room);
  observe(*status);
  stacks = std::make_unique<StatusResponder>(
      *client, k_stacks_keys,
      [&stacks_room](const std::string& request, StatusResponder::Reply reply) {
        stacks_room.answer(request, std::move(reply));
      });
  stacks_room.answer_through(stacks.get());
}

void NodeStore::close() {
  status.reset();
  tree_room.reset();
  tree.reset();  // its links before the job's store
  link_timer.reset();
  link.reset();
  client_on_loop.reset();
  client.reset();
  status.reset();
  stacks.reset();
  collector.reset();
  if (server && !server->wait_until_idle(k_store_linger)) {
    log::debug("leaving with nodes still connected to the store");
  }
  server.reset();
}

}  // namespace ddplaunch
