// StoreServer's admission: accepting connections (paused at EMFILE or a
// full handshake pool), the handshake (HELLO, AUTH), the --rdzv-max-clients
// slots, the oldest handshake replaced in a flood, and the refusals named
// once each, the rest summed up.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "log.hpp"
#include "posix/error.hpp"
#include "posix/net.hpp"
#include "store/server_impl.hpp"

namespace ddplaunch {

using namespace store_server;

namespace {

std::string peer_of(int fd) {
  sockaddr_storage addr = {};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return "an unknown peer";
  }
  char host[NI_MAXHOST] = {};
  char serv[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown peer";
  }
  return std::string(host) + ":" + serv;
}

}  // namespace

// The pending connections stay queued in the listen backlog: stop watching
// the listener until `until` instead of spinning.
void StoreServer::Impl::pause_accept(Steady::time_point until, bool for_pool) {
  epoll_event ev = {};
  ev.data.fd = listener.get();
  epoll_ctl(epoll.get(), EPOLL_CTL_MOD, listener.get(), &ev);
  accept_resume = until;
  accept_paused_for_pool = for_pool;
}

void StoreServer::Impl::accept_all() {
  while (true) {
    if (handshaking >= static_cast<size_t>(options.max_handshakes)) {
      // The handshake pool is full. Its oldest connection, once past its
      // grace (a real client finishes in a few round trips), makes room: a
      // flood of connections that never authenticate delays a node at
      // worst, and never holds a slot. Before that, new ones wait queued.
      const auto now = Steady::now();
      if (auto oldest = evict_oldest_handshake(now - options.handshake_grace)) {
        pause_accept(
            std::max(*oldest + options.handshake_grace, now + std::chrono::milliseconds(1)), true);
        return;
      }
    }
    int fd = accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pause_accept(Steady::now() + std::chrono::milliseconds(100), false);
      }
      return;  // EAGAIN (or a connection that went away): nothing more now
    }
    posix::Fd owned(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn& c = conns[fd];
    count_connections();
    c.fd = std::move(owned);
    c.peer = peer_of(fd);
    c.opened = c.last_input = c.last_output = Steady::now();
    c.serial = ++next_serial;
    ++handshaking;
    handshake_order.emplace_back(fd, c.serial);
    if (handshake_order.size() > 2 * handshaking + 1024) {
      std::erase_if(handshake_order, [&](const std::pair<int, uint64_t>& e) {
        auto it = conns.find(e.first);
        return it == conns.end() || it->second.serial != e.second || it->second.authed;
      });
    }
    epoll_event ev = {};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev);
    c.events = ev.events;
  }
}

// Closes the oldest connection still in its handshake if it opened before
// `cutoff` (it is told BUSY, and tries again); else returns when that one
// opened (nullopt: none is left to close).
std::optional<Steady::time_point> StoreServer::Impl::evict_oldest_handshake(
    Steady::time_point cutoff) {
  while (!handshake_order.empty()) {
    const auto [fd, serial] = handshake_order.front();
    auto it = conns.find(fd);
    if (it == conns.end() || it->second.serial != serial || it->second.authed) {
      handshake_order.pop_front();  // gone, or past its handshake
      continue;
    }
    Conn& c = it->second;
    if (c.opened > cutoff) {
      return c.opened;
    }
    handshake_order.pop_front();
    c.evicted = true;
    ++refusals.evicted;
    if (refusals.summary_due == Steady::time_point{}) {
      refusals.summary_due = Steady::now() + std::chrono::seconds(10);
    }
    // The client reads a reply with an id only once it has HELLO's answer:
    // one still queued goes first (a small frame into an empty socket).
    bool answered = c.hello;
    if (answered && !c.out.empty()) {
      const ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      answered = n == static_cast<ssize_t>(c.out.size());
    }
    const std::string busy =
        answered
            ? protocol::reply::busy(0, "the store is busy with other handshakes; try again")
            : protocol::reply::hello_error("the store is busy with other handshakes; try again",
                                           protocol::Status::k_busy);
    if (answered || c.out.empty()) {
      (void)!::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    reset_conn(fd);
    return std::nullopt;
  }
  return std::nullopt;
}

// Whether a client that just proved itself gets one of the
// --rdzv-max-clients slots; if not, it is told BUSY (it tries again later).
bool StoreServer::Impl::admit(Conn& c, uint32_t id) {
  if (authed_count >= static_cast<size_t>(options.max_clients)) {
    const std::string message =
        "the store has " + std::to_string(options.max_clients) +
        " clients already (--rdzv-max-clients); try again later or raise it";
    queue(c, c.hello ? protocol::reply::busy(id, message)
                     : protocol::reply::hello_error(message, protocol::Status::k_busy));
    c.closing = true;
    c.in.clear();
    return false;
  }
  c.authed = true;
  --handshaking;
  ++authed_count;
  return true;
}

void StoreServer::Impl::warn_peer(const Conn& c, const std::string& what) {
  const std::string host = host_of(c.peer);
  if (refusals.named.contains(host)) {
    return;
  }
  if (refusals.named.size() < 5) {
    refusals.named.insert(host);
    log::warn("the store refused {}: {} (the job goes on; said once per host)", c.peer, what);
    std::lock_guard lock(refused_mutex);
    refused.push_back(host + " (" + what + ")");
    return;
  }
  if (refusals.unnamed++ == 0 && refusals.summary_due == Steady::time_point{}) {
    refusals.summary_due = Steady::now() + std::chrono::seconds(10);
  }
  if (refusals.unnamed_hosts.size() < 65536) {
    refusals.unnamed_hosts.insert(host);
  }
}

// One line for what warn_peer() did not name, and the handshakes replaced.
void StoreServer::Impl::summarise_refusals(Steady::time_point now, bool now_or_never) {
  if (refusals.summary_due == Steady::time_point{} ||
      (now < refusals.summary_due && !now_or_never)) {
    return;
  }
  if (refusals.unnamed > 0) {
    log::warn(
        "the store refused {} more client(s) from {}{} other host(s) (no "
        "token, another job's, or frames that failed their check; the job goes on)",
        refusals.unnamed, refusals.unnamed_hosts.size() >= 65536 ? "at least " : "",
        refusals.unnamed_hosts.size());
  }
  if (refusals.evicted > 0) {
    log::warn(
        "the store closed {} connection(s) that had not finished the handshake to make room "
        "for newer ones (more than {} at once: a flood?); nodes retry",
        refusals.evicted, options.max_handshakes);
  }
  refusals.unnamed = refusals.evicted = 0;
  refusals.unnamed_hosts.clear();
  refusals.summary_due = {};
}

void StoreServer::Impl::hello(Conn& c, const protocol::Request& r) {
  if (r.magic != protocol::k_magic) {
    throw protocol::ProtocolError("not a ddplaunch store client (bad magic number)");
  }
  if (r.version != protocol::k_version) {
    throw protocol::ProtocolError("protocol version mismatch: this store speaks version " +
                                  std::to_string(protocol::k_version) + ", the client version " +
                                  std::to_string(r.version) +
                                  "; run the same ddplaunch version on every node");
  }
  c.client_nonce = r.nonce;
  if (options.token.empty()) {
    if (admit(c, 0)) {
      queue(c, protocol::reply::ok_hello(false, "", ""));
    }
  } else {
    c.server_nonce = auth::random_nonce();
    const std::string worker_proof =
        options.worker_token.empty()
            ? std::string()
            : auth::server_proof(options.worker_token, c.client_nonce, c.server_nonce);
    queue(c, protocol::reply::ok_hello(
                 true, c.server_nonce,
                 auth::server_proof(options.token, c.client_nonce, c.server_nonce), worker_proof));
  }
  c.hello = true;
}

void StoreServer::Impl::authenticate(Conn& c, const protocol::Request& r) {
  if (c.authed || options.token.empty()) {
    throw protocol::ProtocolError("AUTH out of turn");
  }
  auto proves = [&](const std::string& token) {
    return !token.empty() &&
           auth::same_proof(r.nonce, auth::client_proof(token, c.client_nonce, c.server_nonce));
  };
  const bool job = proves(options.token);
  if (!job && !proves(options.worker_token)) {
    warn_peer(c, "a client with a different job token");
    throw protocol::ProtocolError(
        "wrong job token: this store belongs to another job, or the nodes were given "
        "different tokens");
  }
  if (!admit(c, r.id)) {
    return;
  }
  c.worker = !job;
  queue(c, protocol::reply::ok(r.id));
  // Every frame from here on, both ways, is sealed with keys that only
  // holders of the credential the client proved can derive.
  const auth::SessionKeys keys = auth::session_keys(job ? options.token : options.worker_token,
                                                    c.client_nonce, c.server_nonce);
  c.mac_in.emplace(keys.client_to_server);
  c.mac_out.emplace(keys.server_to_client);
}

}  // namespace ddplaunch
