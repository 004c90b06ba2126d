// TCP helpers over getaddrinfo/socket: listening, starting non-blocking
// connects, picking a free port, and telling whether an address belongs to
// this host.
// Stateless; thread-compatible.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "posix/fd.hpp"

namespace ddplaunch::posix {

// Binds and listens on host:port (port 0 = any free port), non-blocking,
// close-on-exec, SO_REUSEADDR. Throws std::system_error naming the address.
Fd listen_tcp(const std::string& host, int port, int backlog = 1024);
// Listens on every address, IPv6 and IPv4 (a dual-stack socket on "::"),
// else on every IPv4 one where IPv6 is off: where the network preflight's
// probe and the tree of agents' stores listen.
Fd listen_anywhere(int port, int backlog = 1024);

// The port a bound socket listens on.
int local_port(int fd);

// A port that was free on this host a moment ago, drawn at random below the
// kernel's ephemeral range (where no outgoing connection takes one) and
// checked by binding it; else what bind to port 0 gives.
int pick_free_port();

// A port picked as pick_free_port() does, and held: `holder` stays bound to
// it (not listening) with SO_REUSEADDR set after the bind, so that no other
// pick, and no bind without SO_REUSEADDR, takes the port while it is open,
// and the listener it was picked for (listen_tcp sets SO_REUSEADDR) still
// binds it, beside the holder.
struct HeldPort {
  int port = 0;
  Fd holder;
};
HeldPort hold_free_port();

// Starts a non-blocking connect to the first address of host:port (IPv4
// first). The socket is non-blocking, close-on-exec, with TCP_NODELAY; it is
// writable once the connect ends, and connect_error() then says how. nullopt
// (errno set) when the host does not resolve or the connect fails at once.
std::optional<Fd> start_connect(const std::string& host, int port);
// The outcome of a connect started by start_connect: 0, or an errno value.
int connect_error(int fd);

// True when `host` resolves to an address this machine can bind (so it is ours).
bool is_local_address(const std::string& host);

// The first IPv4 (else IPv6) address of `host`, numeric; `host` itself on failure.
std::string resolve_numeric(const std::string& host);

}  // namespace ddplaunch::posix
