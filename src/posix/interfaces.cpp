#include "posix/interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <tuple>

#include "config/integer.hpp"
#include "posix/fd.hpp"
#include "posix/net.hpp"

namespace ddplaunch::posix {

namespace {

int prefix_of(const sockaddr* mask) {
  if (mask == nullptr) {
    return 0;
  }
  const auto* bytes = mask->sa_family == AF_INET
                          ? reinterpret_cast<const unsigned char*>(
                                &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr)
                          : reinterpret_cast<const unsigned char*>(
                                &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
  const size_t len = mask->sa_family == AF_INET ? 4 : 16;
  int bits = 0;
  for (size_t i = 0; i < len; ++i) {
    bits += __builtin_popcount(bytes[i]);
  }
  return bits;
}

std::string numeric(const sockaddr* sa) {
  std::array<char, NI_MAXHOST> host{};
  const socklen_t len = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (getnameinfo(sa, len, host.data(), host.size(), nullptr, 0, NI_NUMERICHOST) != 0) {
    return {};
  }
  std::string text = host.data();
  if (auto pct = text.find('%'); pct != std::string::npos) {
    text.resize(pct);  // fe80::1%eth0: the scope is the interface's own
  }
  return text;
}

// The address in network byte order, 4 or 16 bytes; empty when not numeric.
std::vector<unsigned char> bytes_of(const std::string& addr) {
  std::vector<unsigned char> out(16);
  if (inet_pton(AF_INET, addr.c_str(), out.data()) == 1) {
    out.resize(4);
    return out;
  }
  if (inet_pton(AF_INET6, addr.c_str(), out.data()) == 1) {
    return out;
  }
  return {};
}

}  // namespace

std::vector<Interface> interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return out;
  }
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0 ||
        (ifa->ifa_addr->sa_family != AF_INET && ifa->ifa_addr->sa_family != AF_INET6)) {
      continue;
    }
    Interface i;
    i.name = ifa->ifa_name;
    i.addr = numeric(ifa->ifa_addr);
    i.prefix = prefix_of(ifa->ifa_netmask);
    i.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    i.ipv6 = ifa->ifa_addr->sa_family == AF_INET6;
    if (!i.addr.empty()) {
      out.push_back(std::move(i));
    }
  }
  freeifaddrs(list);
  std::stable_sort(out.begin(), out.end(), [](const Interface& a, const Interface& b) {
    return std::tie(a.loopback, a.ipv6) < std::tie(b.loopback, b.ipv6);
  });
  return out;
}

std::optional<std::string> route_source(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0) {
    return std::nullopt;
  }
  std::optional<std::string> found;
  for (addrinfo* ai = res; ai != nullptr && !found; ai = ai->ai_next) {
    Fd fd(socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      continue;
    }
    sockaddr_storage self = {};
    socklen_t len = sizeof(self);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&self), &len) == 0) {
      std::string text = numeric(reinterpret_cast<sockaddr*>(&self));
      if (!text.empty()) {
        found = text;
      }
    }
  }
  freeaddrinfo(res);
  return found;
}

std::optional<Interface> interface_holding(const std::string& addr,
                                           const std::vector<Interface>& ifaces) {
  std::vector<unsigned char> want = bytes_of(addr);
  if (want.empty()) {
    want = bytes_of(resolve_numeric(addr));
  }
  if (want.empty()) {
    return std::nullopt;
  }
  for (const auto& i : ifaces) {
    if (bytes_of(i.addr) == want) {
      return i;
    }
  }
  // Linux answers for all of 127.0.0.0/8 on lo, not just 127.0.0.1: an agent
  // with --local-addr 127.0.0.2 is on lo as much as one with 127.0.0.1.
  for (const auto& i : ifaces) {
    if (i.loopback && in_network(addr, i.addr + "/" + std::to_string(i.prefix))) {
      return i;
    }
  }
  return std::nullopt;
}

bool in_network(const std::string& addr, const std::string& network) {
  const auto slash = network.find('/');
  if (slash == std::string::npos) {
    return false;
  }
  const auto a = bytes_of(addr);
  const auto n = bytes_of(network.substr(0, slash));
  if (a.empty() || a.size() != n.size()) {
    return false;
  }
  const auto prefix = parse_integer_in(std::string_view(network).substr(slash + 1), 0,
                                       static_cast<long long>(a.size() * 8));
  if (!prefix) {
    return false;
  }
  int bits = static_cast<int>(*prefix);
  for (size_t i = 0; i < a.size() && bits > 0; ++i, bits -= 8) {
    const unsigned mask = bits >= 8 ? 0xffU : (0xffU << (8 - bits)) & 0xffU;
    if ((a[i] & mask) != (n[i] & mask)) {
      return false;
    }
  }
  return true;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.starts_with("127.");
}

}  // namespace ddplaunch::posix
