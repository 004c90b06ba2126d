#include "posix/net.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "config/integer.hpp"
#include "posix/error.hpp"

namespace ddplaunch::posix {

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoPtr resolve(const std::string& host, int port, bool passive) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : AI_ADDRCONFIG;
  in6_addr numeric{};
  if (!host.empty() && (inet_pton(AF_INET, host.c_str(), &numeric) == 1 ||
                        inet_pton(AF_INET6, host.c_str(), &numeric) == 1)) {
    // An address already: no lookup, and no netlink socket for AI_ADDRCONFIG.
    hints.ai_flags = AI_NUMERICHOST | (passive ? AI_PASSIVE : 0);
  }
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    throw std::system_error(EHOSTUNREACH, std::generic_category(),
                            "cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  return AddrInfoPtr(res);
}

// IPv4 first: loopback tests and most clusters advertise IPv4.
template <typename F>
void for_each_addr(addrinfo* list, F&& f) {
  for (int pass = 0; pass < 2; ++pass) {
    for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
      if ((pass == 0) == (ai->ai_family == AF_INET)) {
        if (f(ai)) {
          return;
        }
      }
    }
  }
}

}  // namespace

Fd listen_tcp(const std::string& host, int port, int backlog) {
  auto list = resolve(host, port, true);
  int last_errno = EADDRNOTAVAIL;
  Fd result;
  for_each_addr(list.get(), [&](addrinfo* ai) {
    Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
      last_errno = errno;
      return false;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd.get(), backlog) != 0) {
      last_errno = errno;
      return false;
    }
    result = std::move(fd);
    return true;
  });
  if (!result) {
    errno = last_errno;
    throw_errno("cannot listen on " + (host.empty() ? std::string("*") : host) + ":" +
                std::to_string(port));
  }
  return result;
}

Fd listen_anywhere(int port, int backlog) {
  try {
    return listen_tcp("::", port, backlog);
  } catch (const std::system_error&) {
    return listen_tcp("0.0.0.0", port, backlog);
  }
}

int local_port(int fd) {
  sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    throw_errno("getsockname");
  }
  if (ss.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

namespace {

// The low end of the kernel's ephemeral port range, from which connect()
// takes every outgoing connection's local port.
int ephemeral_low() {
  if (auto text = read_small_file("/proc/sys/net/ipv4/ip_local_port_range", 64)) {
    const auto low = leading_integer(*text);
    if (low && *low > 2048 && *low <= 65535) {
      return static_cast<int>(*low);
    }
  }
  return 32768;
}

// Binds `fd` to port `port` (0: any) of every IPv4 address, without
// SO_REUSEADDR: it fails where any socket holds the port, even one of a
// hold_free_port() (which sets SO_REUSEADDR only after its bind).
bool bindable(int fd, int port) {
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

// A port from bind(0) lies in the ephemeral range, so between this check and
// the workers' bind (PyTorch's TCPStore on MASTER_PORT) any outgoing
// connection on the host could take it. A port drawn below that range is
// taken only by an explicit bind; it is checked by binding it. bind(0) is
// the fallback when every draw is taken. Returns the port and the socket
// bound to it.
HeldPort bind_free_port() {
  const int low = ephemeral_low();
  const int from = std::max(1024, low / 2);
  for (int attempt = 0; attempt < 16; ++attempt) {
    uint32_t draw = 0;
    if (getrandom(&draw, sizeof(draw), 0) != sizeof(draw)) {
      break;
    }
    const int port = from + static_cast<int>(draw % static_cast<uint32_t>(low - from));
    Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) {
      throw_errno("socket");
    }
    if (bindable(fd.get(), port)) {
      return {port, std::move(fd)};
    }
  }
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    throw_errno("socket");
  }
  if (!bindable(fd.get(), 0)) {
    throw_errno("bind to pick a free port");
  }
  const int port = local_port(fd.get());
  return {port, std::move(fd)};
}

}  // namespace

int pick_free_port() {
  return bind_free_port().port;  // the socket closes here
}

HeldPort hold_free_port() {
  HeldPort held = bind_free_port();
  // Only now: a later bind with SO_REUSEADDR (the listener the port is for)
  // may share it, every check of another pick still fails (see HeldPort).
  int one = 1;
  setsockopt(held.holder.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  return held;
}

std::optional<Fd> start_connect(const std::string& host, int port) {
  AddrInfoPtr list;
  try {
    list = resolve(host, port, false);
  } catch (const std::system_error&) {
    errno = EHOSTUNREACH;
    return std::nullopt;
  }
  std::optional<Fd> result;
  int last_errno = ECONNREFUSED;
  for_each_addr(list.get(), [&](addrinfo* ai) {
    Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
      last_errno = errno;
      return false;
    }
    int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_errno = errno;
      return false;
    }
    result = std::move(fd);
    return true;
  });
  if (!result) {
    errno = last_errno;
  }
  return result;
}

int connect_error(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    return errno;
  }
  return err;
}

bool is_local_address(const std::string& host) {
  AddrInfoPtr list;
  try {
    list = resolve(host, 0, false);
  } catch (const std::system_error&) {
    return false;
  }
  bool local = false;
  for_each_addr(list.get(), [&](addrinfo* ai) {
    Fd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd && bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
      local = true;
    }
    return local;
  });
  return local;
}

std::string resolve_numeric(const std::string& host) {
  AddrInfoPtr list;
  try {
    list = resolve(host, 0, false);
  } catch (const std::system_error&) {
    return host;
  }
  std::string out = host;
  for_each_addr(list.get(), [&](addrinfo* ai) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* src =
        ai->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr);
    if (inet_ntop(ai->ai_family, src, buf, sizeof(buf)) != nullptr) {
      out = buf;
      return true;
    }
    return false;
  });
  return out;
}

}  // namespace ddplaunch::posix
