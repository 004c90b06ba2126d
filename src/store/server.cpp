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
#include "store/server_impl.hpp"

namespace ddplaunch {

using namespace store_server;

void StoreServer::Impl::update_events(int fd) {
  Conn& c = conns.at(fd);
  c.reading = !c.closing && c.out.size() < options.out_high_water && c.in.size() < input_limit(c);
  const uint32_t events = EPOLLRDHUP | (c.reading ? EPOLLIN : 0u) | (c.out.empty() ? 0u : EPOLLOUT);
  if (events == c.events) {
    return;  // most flushes send everything and leave it reading: no system call
  }
  epoll_event ev = {};
  ev.events = events;
  ev.data.fd = fd;
  epoll_ctl(epoll.get(), EPOLL_CTL_MOD, fd, &ev);
  c.events = events;
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
  update_events(fd);
  if (c.reading && has_frame(c)) {
    // Requests held back by unread replies go on now: nothing else would
    // wake them once their bytes are all read from the socket (a flush that
    // sent every reply at once left them waiting for input that never came).
    process(fd);
  }
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
  // The frames before `done` are handled: erased from the buffer once, after
  // the loop (erasing each as it goes moved the rest of a 64 KiB read of
  // small requests once per request).
  size_t done = 0;
  try {
    // Replies not yet read hold further requests back: a client that only
    // sends costs at most the high-water mark plus one reply.
    while (!c.closing && c.out.size() < options.out_high_water) {
      // Before the handshake is done, a frame larger than HELLO or AUTH is an
      // error before it is buffered (its length comes first).
      const std::string_view rest = std::string_view(c.in).substr(std::min(done, c.in.size()));
      auto len = protocol::complete_frame(rest, input_limit(c) - 4);
      if (!len) {
        break;
      }
      std::string_view sealed = rest.substr(4, *len);
      if (c.mac_in && !c.mac_in->open(sealed, sealed)) {
        forged = true;  // changed, replayed, reordered or injected on the way
        break;
      }
      const std::string body(sealed);
      done += 4 + *len;
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
  c.in.erase(0, std::min(done, c.in.size()));  // an error may have emptied it
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
    const size_t asked = std::min(buf.size(), room);
    ssize_t n = ::recv(fd, buf.data(), asked, 0);
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
    // A short read emptied the socket: no recv() just to hear EAGAIN (epoll
    // is level-triggered, and says so again when more comes).
    if (c.in.size() >= input_limit(c) || static_cast<size_t>(n) < asked) {
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
    : StoreServer(posix::listen_tcp(host, port, k_backlog), std::move(options)) {}

StoreServer::StoreServer(posix::Fd listener, StoreOptions options)
    : m_impl(std::make_unique<Impl>()) {
  posix::raise_fd_limit();  // one connection per node
  Impl& s = *m_impl;
  s.options = std::move(options);
  s.listener = std::move(listener);
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
