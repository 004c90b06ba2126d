#include "store/server.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "log.hpp"
#include "posix/error.hpp"
#include "posix/fd.hpp"
#include "posix/net.hpp"
#include "store/auth.hpp"
#include "store/kv_core.hpp"
#include "store/protocol.hpp"

namespace ddplaunch {

namespace {

using Steady = std::chrono::steady_clock;
constexpr size_t k_out_high_water = 4 * 1024 * 1024;  // stop reading a client past this

struct Conn {
  posix::Fd fd;
  std::string peer;  // "addr:port", for the master's warnings
  std::string in;
  std::string out;
  bool hello = false;
  bool authed = false;   // HELLO done, and AUTH where the store has a token
  bool closing = false;  // close once `out` is flushed
  bool reading = true;
  bool evicted = false;  // replaced by a newer handshake (a flood), not refused
  bool reset = false;    // the client reset it: it left (gave up waiting), not refused
  bool worker = false;   // authenticated with the workers' credential: scoped
  std::string client_nonce;
  std::string server_nonce;
  uint64_t serial = 0;  // in accept order: the oldest handshake goes first
  // The authenticated session, from AUTH on (a store with a token).
  std::optional<auth::FrameMac> mac_in;
  std::optional<auth::FrameMac> mac_out;
  Steady::time_point opened;
  Steady::time_point last_input;   // the last bytes received
  Steady::time_point last_output;  // the last bytes sent (or when `out` last was empty)
};

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

// True when a whole request waits in the input buffer (or an oversized one,
// which process() turns into an error).
bool has_frame(const Conn& c) {
  try {
    return protocol::complete_frame(c.in).has_value();
  } catch (const protocol::ProtocolError&) {
    return true;
  }
}

// Appends a reply (sealed in a session); the stall clock starts when the
// queue stops being empty.
void queue(Conn& c, const std::string& reply) {
  if (c.out.empty()) {
    c.last_output = Steady::now();
  }
  if (c.mac_out) {
    c.mac_out->seal(reply, c.out);
  } else {
    c.out += reply;
  }
}

// What a connection may hold of a frame not yet complete: before the
// handshake is done, no more than HELLO or AUTH can need.
size_t input_limit(const Conn& c) {
  return c.authed ? protocol::k_max_frame + protocol::k_frame_tag + 4
                  : protocol::k_max_handshake_frame + 4;
}

std::string host_of(const std::string& peer) {
  auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

}  // namespace

struct StoreServer::Impl {
  StoreOptions options;
  posix::Fd listener;
  posix::Fd epoll;
  posix::Fd wake;  // eventfd: stop()
  int port = 0;
  std::thread thread;
  bool stopped = false;
  std::unordered_map<int, Conn> conns;
  // How many are open, for wait_until_idle() on another thread.
  std::mutex count_mutex;
  std::condition_variable count_changed;
  size_t open_count = 0;
  void count_connections() {
    {
      std::lock_guard lock(count_mutex);
      open_count = conns.size();
    }
    count_changed.notify_all();
  }
  KvCore core;  // the keys, the parked requests, the ON_CLOSE words
  // Connections with new replies: flushed by the loop, never from inside a
  // write (a write that answers others does not recurse).
  std::set<int> touched;
  std::optional<Steady::time_point>
      accept_resume;                    // accept() paused (EMFILE, a full pool) until then
  bool accept_paused_for_pool = false;  // resumed as soon as a handshake ends
  Steady::time_point next_sweep;
  // Connections past the handshake (at most options.max_clients), and those
  // still in it (at most options.max_handshakes: a newer one replaces the
  // oldest), in accept order; entries of connections gone since are skipped.
  size_t authed_count = 0;
  size_t handshaking = 0;
  uint64_t next_serial = 0;
  std::deque<std::pair<int, uint64_t>> handshake_order;
  // Clients refused or cut off: the first few hosts are named once each, the
  // rest counted and summed up at most every 10 s.
  struct Refusals {
    std::set<std::string> named;
    size_t unnamed = 0;
    std::set<std::string> unnamed_hosts;  // bounded
    size_t evicted = 0;
    Steady::time_point summary_due;
  } refusals;
  // The named refusals for other threads (refused_hosts()): "HOST (why)".
  mutable std::mutex refused_mutex;
  std::vector<std::string> refused;

  void loop();
  void accept_all();
  void on_readable(int fd);
  void process(int fd);
  void handle(int fd, Conn& c, protocol::Request r);
  void hello(Conn& c, const protocol::Request& r);
  void authenticate(Conn& c, const protocol::Request& r);
  void deliver(std::vector<KvCore::Out> out);
  void flush_touched();
  void flush(int fd);
  void close_conn(int fd);
  void update_events(int fd);
  void error(Conn& c, uint32_t id, const std::string& message);
  void sweep(Steady::time_point now);
  void warn_peer(const Conn& c, const std::string& what);
  void summarise_refusals(Steady::time_point now, bool now_or_never = false);
  std::optional<Steady::time_point> evict_oldest_handshake(Steady::time_point cutoff);
  void pause_accept(Steady::time_point until, bool for_pool);
  bool admit(Conn& c, uint32_t id);
  void reset_conn(int fd);
};

void StoreServer::Impl::update_events(int fd) {
  Conn& c = conns.at(fd);
  c.reading = !c.closing && c.out.size() < k_out_high_water && c.in.size() < input_limit(c);
  epoll_event ev = {};
  ev.events = EPOLLRDHUP | (c.reading ? EPOLLIN : 0u) | (c.out.empty() ? 0u : EPOLLOUT);
  ev.data.fd = fd;
  epoll_ctl(epoll.get(), EPOLL_CTL_MOD, fd, &ev);
}

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

void StoreServer::Impl::deliver(std::vector<KvCore::Out> out) {
  for (auto& o : out) {
    auto it = conns.find(o.client);
    if (it != conns.end()) {
      queue(it->second, o.frame);
      touched.insert(o.client);
    }
  }
}

void StoreServer::Impl::flush_touched() {
  while (!touched.empty()) {
    const int fd = *touched.begin();
    touched.erase(touched.begin());
    if (conns.contains(fd)) {
      flush(fd);
    }
  }
}

void StoreServer::Impl::sweep(Steady::time_point now) {
  std::vector<int> doomed;
  for (auto& [fd, c] : conns) {
    const bool slow_handshake = !c.authed && now - c.opened > options.handshake_timeout;
    const bool half_frame = !c.in.empty() && now - c.last_input > options.handshake_timeout;
    const bool stalled = !c.out.empty() && now - c.last_output > options.stall_timeout;
    if (slow_handshake || half_frame || stalled) {
      doomed.push_back(fd);
    }
  }
  for (int fd : doomed) {
    reset_conn(fd);
  }
  summarise_refusals(now);
}

// Reset, not FIN: a FIN would wait behind replies the client never reads,
// and the kernel would keep buffering them.
void StoreServer::Impl::reset_conn(int fd) {
  linger abort = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
  close_conn(fd);
}

void StoreServer::Impl::close_conn(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end()) {
    return;
  }
  if (it->second.hello && !it->second.authed && !it->second.evicted && !it->second.closing &&
      !it->second.reset) {
    warn_peer(it->second, "a client without this job's token (none, or a different one)");
  }
  if (it->second.authed) {
    --authed_count;
  } else {
    --handshaking;
  }
  epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
  conns.erase(it);
  count_connections();
  touched.erase(fd);
  deliver(core.close(fd));  // its parked requests go; its ON_CLOSE word is written
}

void StoreServer::Impl::error(Conn& c, uint32_t id, const std::string& message) {
  queue(c, c.hello ? protocol::reply::error(id, message) : protocol::reply::hello_error(message));
  c.closing = true;
  c.in.clear();
}

void StoreServer::Impl::flush(int fd) {
  Conn& c = conns.at(fd);
  while (!c.out.empty()) {
    ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        break;
      }
      c.reset = errno == ECONNRESET || errno == EPIPE;
      close_conn(fd);
      return;
    }
    c.out.erase(0, static_cast<size_t>(n));
    c.last_output = Steady::now();
  }
  if (c.out.empty() && c.closing) {
    close_conn(fd);
    return;
  }
  if (c.out.empty()) {
    c.out.shrink_to_fit();
  }
  const bool held_back = !c.reading;
  update_events(fd);
  if (held_back && c.reading && has_frame(c)) {
    process(fd);  // requests held back by unread replies may go on
  }
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

// One request: the handshake's own steps here, every other operation in the core.
void StoreServer::Impl::handle(int fd, Conn& c, protocol::Request r) {
  if (!c.hello) {
    if (r.op != protocol::Op::k_hello) {
      throw protocol::ProtocolError("the first message must be HELLO");
    }
    hello(c, r);
    return;
  }
  if (!c.authed) {
    if (r.op != protocol::Op::k_auth) {
      warn_peer(c, "a client without the job's token");
      throw protocol::ProtocolError(
          "this store admits only the job's nodes: give the job's token (--rdzv-token-file or "
          "DDPLAUNCH_RDZV_TOKEN)");
    }
    authenticate(c, r);
    return;
  }
  if (c.worker) {
    if (std::string why = auth::worker_refusal(r); !why.empty()) {
      throw protocol::ProtocolError(why);
    }
  }
  deliver(core.apply(fd, std::move(r), Steady::now()));
}

void StoreServer::Impl::process(int fd) {
  Conn& c = conns.at(fd);
  std::optional<protocol::Request> request;
  bool forged = false;
  try {
    // Replies not yet read hold further requests back: a client that only
    // sends costs at most the high-water mark plus one reply.
    while (!c.closing && c.out.size() < k_out_high_water) {
      // Before the handshake is done, a frame larger than HELLO or AUTH is an
      // error before it is buffered (its length comes first).
      auto len = protocol::complete_frame(c.in, input_limit(c) - 4);
      if (!len) {
        break;
      }
      std::string_view sealed = std::string_view(c.in).substr(4, *len);
      if (c.mac_in && !c.mac_in->open(sealed, sealed)) {
        forged = true;  // changed, replayed, reordered or injected on the way
        break;
      }
      const std::string body(sealed);
      c.in.erase(0, 4 + *len);
      request.reset();
      if (!c.hello && (body.empty() || body[0] != static_cast<char>(protocol::Op::k_hello))) {
        throw protocol::ProtocolError("the first message must be HELLO");
      }
      request = protocol::decode_request(body);
      handle(fd, c, std::move(*request));  // its id stays readable for an error
    }
  } catch (const protocol::ProtocolError& e) {
    error(c, request ? request->id : 0, e.what());
  }
  if (forged) {
    warn_peer(c,
              "a frame that failed its authentication check (changed, replayed or injected "
              "on the way): the connection was closed");
    reset_conn(fd);
    return;
  }
  if (c.in.empty()) {
    c.in.shrink_to_fit();  // an idle connection keeps no buffer: 16,384 nodes hold 16,384
  }
  touched.insert(fd);
}

void StoreServer::Impl::on_readable(int fd) {
  std::array<char, 64 * 1024> buf;
  Conn& c = conns.at(fd);
  while (c.reading) {
    // Never more than the connection may hold (before AUTH: a handshake's).
    const size_t room = input_limit(c) > c.in.size() ? input_limit(c) - c.in.size() : 1;
    ssize_t n = ::recv(fd, buf.data(), std::min(buf.size(), room), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      // The client went away: what it sent before still counts (a SET just
      // before exiting); any parked request goes with it.
      c.reading = false;
      c.reset = n < 0 && errno == ECONNRESET;
      process(fd);
      close_conn(fd);
      return;
    }
    if (n < 0) {
      break;
    }
    c.in.append(buf.data(), static_cast<size_t>(n));
    c.last_input = Steady::now();
    if (c.in.size() >= input_limit(c)) {
      break;
    }
  }
  process(fd);
}

void StoreServer::Impl::loop() {
  std::array<epoll_event, 256> events;
  while (true) {
    // The nearest of: the sweep, a parked request's deadline, accept()'s resumption.
    Steady::time_point next = Steady::time_point::max();
    if (!conns.empty()) {
      next = next_sweep;
    }
    next = std::min(next, core.next_deadline().value_or(Steady::time_point::max()));
    next = std::min(next, accept_resume.value_or(Steady::time_point::max()));
    int timeout_ms = -1;
    if (next != Steady::time_point::max()) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Steady::now()).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
    }
    int n = epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      const uint32_t ev = events[static_cast<size_t>(i)].events;
      if (fd == wake.get()) {
        return;
      }
      if (fd == listener.get()) {
        accept_all();
        continue;
      }
      if (!conns.contains(fd)) {
        continue;
      }
      if ((ev & EPOLLOUT) != 0) {
        flush(fd);
      }
      if (conns.contains(fd) && (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
        if (conns.at(fd).reading || (ev & (EPOLLHUP | EPOLLERR)) != 0) {
          on_readable(fd);
        }
      }
    }
    flush_touched();
    const auto now = Steady::now();
    deliver(core.expire(now));
    flush_touched();
    const bool pool_room =
        accept_paused_for_pool && handshaking < static_cast<size_t>(options.max_handshakes);
    if (accept_resume && (*accept_resume <= now || pool_room)) {
      accept_paused_for_pool = false;
      accept_resume.reset();
      epoll_event ev = {};
      ev.events = EPOLLIN;
      ev.data.fd = listener.get();
      epoll_ctl(epoll.get(), EPOLL_CTL_MOD, listener.get(), &ev);
    }
    if (now >= next_sweep) {
      sweep(now);
      next_sweep = now + std::chrono::seconds(1);
    }
  }
}

StoreServer::StoreServer(const std::string& host, int port, StoreOptions options)
    : m_impl(std::make_unique<Impl>()) {
  posix::raise_fd_limit();  // one connection per node
  Impl& s = *m_impl;
  s.options = std::move(options);
  s.listener = posix::listen_tcp(host, port, 4096);
  s.port = posix::local_port(s.listener.get());
  s.epoll = posix::Fd(epoll_create1(EPOLL_CLOEXEC));
  s.wake = posix::Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s.epoll || !s.wake) {
    posix::throw_errno("store server setup");
  }
  for (int fd : {s.listener.get(), s.wake.get()}) {
    epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(s.epoll.get(), EPOLL_CTL_ADD, fd, &ev);
  }
  if (!s.options.serve_later) {
    serve();
  }
}

void StoreServer::serve() {
  if (!m_impl->thread.joinable() && !m_impl->stopped) {
    m_impl->thread = std::thread([this] { m_impl->loop(); });
  }
}

StoreServer::~StoreServer() {
  stop();
}

int StoreServer::port() const {
  return m_impl->port;
}

std::vector<std::string> StoreServer::refused_hosts() const {
  std::lock_guard lock(m_impl->refused_mutex);
  return m_impl->refused;
}

int StoreServer::listen_fd() const {
  return m_impl->listener.get();
}

bool StoreServer::wait_until_idle(std::chrono::milliseconds timeout) {
  if (!m_impl->thread.joinable()) {
    return true;
  }
  std::unique_lock lock(m_impl->count_mutex);
  return m_impl->count_changed.wait_for(lock, timeout, [this] { return m_impl->open_count == 0; });
}

void StoreServer::stop() {
  if (m_impl->stopped) {
    return;
  }
  m_impl->stopped = true;
  uint64_t one = 1;
  ssize_t ignored = ::write(m_impl->wake.get(), &one, sizeof(one));
  (void)ignored;
  if (m_impl->thread.joinable()) {
    m_impl->thread.join();
  }
  m_impl->summarise_refusals(Steady::now(), true);  // what was not said yet
  m_impl->conns.clear();
  m_impl->listener.close();
}

}  // namespace ddplaunch
