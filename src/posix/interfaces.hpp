// This host's network interfaces (getifaddrs) and the route to a peer: what
// the launcher needs to advertise an address other hosts can dial and to tell
// gloo and NCCL which interface to use.
// Stateless; thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddplaunch::posix {

struct Interface {
  std::string name;  // "eth0"
  std::string addr;  // numeric, "10.0.0.1" or "fd00::1"
  int prefix = 0;    // network prefix length
  bool loopback = false;
  bool ipv6 = false;
};

// Every interface address that is up, IPv4 before IPv6, loopback last.
std::vector<Interface> interfaces();

// The address of this host that packets to `host` leave from (the kernel's
// route, found by connecting a UDP socket: nothing is sent). nullopt when
// `host` does not resolve or has no route.
std::optional<std::string> route_source(const std::string& host);

// The interface holding `addr` (numeric, or a name resolved first); nullopt
// when no interface holds it.
std::optional<Interface> interface_holding(const std::string& addr,
                                           const std::vector<Interface>& ifaces);

// True when `addr` lies in `network` ("addr/prefix"). Pure.
bool in_network(const std::string& addr, const std::string& network);

// True for 127.0.0.0/8, ::1 and "localhost". Pure.
bool is_loopback(const std::string& addr);

}  // namespace ddplaunch::posix
