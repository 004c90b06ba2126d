#include "rendezvous/store_host.hpp"

#include <algorithm>
#include <system_error>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"
#include "rendezvous/host_link.hpp"
#include "rendezvous/member_link.hpp"
#include "store/auth.hpp"

namespace ddplaunch {

namespace {

// Every interface (as TCPStore), so that other hosts reach node 0 whatever its
// own name resolves to there (Debian maps it to 127.0.1.1); loopback for a
// loopback job; or what --store-bind says.
std::string store_bind_address(const Config& c) {
  if (!c.store_bind.empty()) {
    return c.store_bind;
  }
  return posix::is_loopback(c.master_addr) ? c.master_addr : "";
}

}  // namespace

std::unique_ptr<StoreServer> host_store(const Config& config) {
  const bool explicit_host = config.node_rank == 0;
  if (!explicit_host && (config.node_rank || !posix::is_local_address(config.master_addr))) {
    return nullptr;
  }
  try {
    StoreOptions options;
    options.token = config.rdzv_token;
    if (!options.token.empty()) {
      options.worker_token = auth::worker_token(options.token);  // the workers' (launch.cpp)
    }
    // One connection per agent: the job's own nodes are never refused.
    options.max_clients = std::max(config.rdzv_max_clients, config.nnodes + 64);
    auto server = std::make_unique<StoreServer>(store_bind_address(config), config.master_port,
                                                std::move(options));
    log::debug("hosting the store on {}:{}", config.master_addr, config.master_port);
    return server;
  } catch (const std::system_error& e) {
    if (explicit_host) {
      throw LaunchError(k_exit_rendezvous,
                        "node 0 cannot host the store: " + std::string(e.what()) +
                            "; is another job using --master-port " +
                            std::to_string(config.master_port) + "? choose a free port");
    }
    return nullptr;  // another agent on this host got there first: it is node 0
  }
}

std::unique_ptr<StoreLink> make_store_link(const Config& config, StoreConnection& connection,
                                           const Clock& clock, bool hosting) {
  if (hosting) {
    return std::make_unique<HostLink>(config, connection, clock,
                                      [] { return posix::pick_free_port(); });
  }
  return std::make_unique<MemberLink>(config, connection, clock);
}

}  // namespace ddplaunch
