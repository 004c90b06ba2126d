// Hosting the job's store, and building the link that fits: node 0 (the
// agent that hosts the store) gets a HostLink, every other agent a
// MemberLink, both over one connection to the store.
#pragma once

#include <memory>

#include "config/config.hpp"
#include "posix/clock.hpp"
#include "rendezvous/store_link.hpp"
#include "store/connection.hpp"
#include "store/server.hpp"

namespace ddplaunch {

// The store, if this agent is node 0: --node-rank 0, or an automatic rank
// on the host --master-addr names, where the first agent to bind the port is
// node 0 (another agent on this host got there first: null). Null on every
// other node. Throws LaunchError (exit 3) when --node-rank 0 cannot bind the
// port.
std::unique_ptr<StoreServer> host_store(const Config& config);

// A HostLink when `hosting`, else a MemberLink. Each argument must outlive it.
std::unique_ptr<StoreLink> make_store_link(const Config& config, StoreConnection& connection,
                                           const Clock& clock, bool hosting);

}  // namespace ddplaunch
