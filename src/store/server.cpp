#include "store/server.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "log.hpp"
#include "posix/error.hpp"
#include "posix/fd.hpp"
#include "posix/net.hpp"
#include "store/auth.hpp"
#include "store/protocol.hpp"

namespace ddplaunch {

namespace {

using Clock = std::chrono::steady_clock;
using protocol::Op;
using protocol::Status;
constexpr size_t k_out_high_water = 4 * 1024 * 1024;  // stop reading a client past this

struct Waiter {
  bool is_get = false;
  std::vector<std::string> keys;
  std::optional<Clock::time_point> deadline;
};

struct Conn {
  posix::Fd fd;
  std::string peer;  // "addr:port", for the master's warnings
  std::string in;
  std::string out;
  bool hello = false;
  bool authed = false;   // HELLO done, and AUTH where the store has a token
  bool closing = false;  // close once `out` is flushed
  bool reading = true;
  std::string client_nonce;
  std::string server_nonce;
  Clock::time_point opened;
  Clock::time_point last_input;   // the last bytes received
  Clock::time_point last_output;  // the last bytes sent (or when `out` last was empty)
  std::optional<Waiter> waiter;
  std::optional<std::pair<std::string, std::string>> on_close;  // ON_CLOSE: key, value
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

// Appends a reply; the stall clock starts when the queue stops being empty.
void queue(Conn& c, const std::string& reply) {
  if (c.out.empty()) {
    c.last_output = Clock::now();
  }
  c.out += reply;
}

std::string host_of(const std::string& peer) {
  auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

void raise_fd_limit() {
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

using protocol::reply::ok;

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
  std::unordered_map<std::string, std::string> data;
  size_t data_bytes = 0;                                    // keys and values held
  std::unordered_map<std::string, std::set<int>> watchers;  // key -> waiting conns
  std::set<std::pair<Clock::time_point, int>> deadlines;
  // Connections whose parked request was answered by a write: processed by
  // the loop, one after another, never from inside the write (no recursion).
  std::vector<int> woken;
  std::optional<Clock::time_point> accept_resume;  // accept() paused (EMFILE) until then
  Clock::time_point next_sweep;
  std::set<std::string> warned_peers;  // hosts told once about a bad token

  void loop();
  void accept_all();
  void on_readable(int fd);
  void process(int fd);
  void handle(int fd, Conn& c, std::string_view body);
  void flush(int fd);
  void close_conn(int fd);
  void update_events(int fd);
  void set_key(const std::string& key, std::string value);
  bool try_complete(int fd, Conn& c);
  void park(int fd, Conn& c, Waiter w);
  void unpark(int fd, Conn& c);
  void error(Conn& c, const std::string& message);
  void run_woken();
  void sweep(Clock::time_point now);
  void warn_peer(const Conn& c, const std::string& what);
  void check_store_room(const std::string& key, size_t value_size);
  void store_value(const std::string& key, std::string value);
};

void StoreServer::Impl::update_events(int fd) {
  Conn& c = conns.at(fd);
  c.reading =
      !c.closing && c.out.size() < k_out_high_water && c.in.size() < protocol::k_max_frame + 4;
  epoll_event ev = {};
  ev.events = EPOLLRDHUP | (c.reading ? EPOLLIN : 0u) | (c.out.empty() ? 0u : EPOLLOUT);
  ev.data.fd = fd;
  epoll_ctl(epoll.get(), EPOLL_CTL_MOD, fd, &ev);
}

void StoreServer::Impl::accept_all() {
  while (true) {
    int fd = accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays queued and the listener stays
        // readable: stop watching it for a moment instead of spinning.
        epoll_event ev = {};
        ev.data.fd = listener.get();
        epoll_ctl(epoll.get(), EPOLL_CTL_MOD, listener.get(), &ev);
        accept_resume = Clock::now() + std::chrono::milliseconds(100);
      }
      return;  // EAGAIN (or a connection that went away): nothing more now
    }
    posix::Fd owned(fd);
    if (conns.size() >= static_cast<size_t>(options.max_clients)) {
      const std::string refusal = protocol::reply::error(
          "the store has " + std::to_string(options.max_clients) +
          " clients already (--rdzv-max-clients); try again later or raise it");
      (void)!::send(fd, refusal.data(), refusal.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;  // closed by `owned`
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn& c = conns[fd];
    c.fd = std::move(owned);
    c.peer = peer_of(fd);
    c.opened = c.last_input = c.last_output = Clock::now();
    epoll_event ev = {};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev);
  }
}

void StoreServer::Impl::warn_peer(const Conn& c, const std::string& what) {
  if (warned_peers.insert(host_of(c.peer)).second) {
    log::warn("the store refused {}: {} (the job goes on; said once per host)", c.peer, what);
  }
}

void StoreServer::Impl::run_woken() {
  while (!woken.empty()) {
    std::vector<int> batch;
    batch.swap(woken);
    for (int fd : batch) {
      if (conns.contains(fd)) {
        process(fd);
      }
    }
  }
}

void StoreServer::Impl::sweep(Clock::time_point now) {
  std::vector<int> doomed;
  for (auto& [fd, c] : conns) {
    const bool handshaking = !c.authed && now - c.opened > options.handshake_timeout;
    const bool half_frame = !c.in.empty() && now - c.last_input > options.handshake_timeout;
    const bool stalled = !c.out.empty() && now - c.last_output > options.stall_timeout;
    if (handshaking || half_frame || stalled) {
      doomed.push_back(fd);
    }
  }
  for (int fd : doomed) {
    // Reset, not FIN: a FIN would wait behind replies the client never reads,
    // and the kernel would keep buffering them.
    linger abort = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
    close_conn(fd);
  }
}

void StoreServer::Impl::close_conn(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end()) {
    return;
  }
  if (it->second.hello && !it->second.authed) {
    warn_peer(it->second, "a client without this job's token (none, or a different one)");
  }
  unpark(fd, it->second);
  epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
  auto last_word = std::move(it->second.on_close);
  conns.erase(it);
  if (last_word && !data.contains(last_word->first)) {
    try {
      check_store_room(last_word->first, last_word->second.size());
      set_key(last_word->first, std::move(last_word->second));
    } catch (const protocol::ProtocolError&) {
      // the store is full: the word is lost, as a SET would be refused
    }
  }
}

void StoreServer::Impl::error(Conn& c, const std::string& message) {
  queue(c, protocol::reply::error(message));
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
      close_conn(fd);
      return;
    }
    c.out.erase(0, static_cast<size_t>(n));
    c.last_output = Clock::now();
  }
  if (c.out.empty() && c.closing) {
    close_conn(fd);
    return;
  }
  if (c.out.size() < k_out_high_water && !c.waiter && !c.closing && has_frame(c)) {
    woken.push_back(fd);  // requests held back by unread replies may go on
  }
  update_events(fd);
}

void StoreServer::Impl::park(int fd, Conn& c, Waiter w) {
  for (const auto& k : w.keys) {
    watchers[k].insert(fd);
  }
  if (w.deadline) {
    deadlines.emplace(*w.deadline, fd);
  }
  c.waiter = std::move(w);
}

void StoreServer::Impl::unpark(int fd, Conn& c) {
  if (!c.waiter) {
    return;
  }
  for (const auto& k : c.waiter->keys) {
    auto it = watchers.find(k);
    if (it != watchers.end()) {
      it->second.erase(fd);
      if (it->second.empty()) {
        watchers.erase(it);
      }
    }
  }
  if (c.waiter->deadline) {
    deadlines.erase({*c.waiter->deadline, fd});
  }
  c.waiter.reset();
}

// Answers a parked request if its keys now exist. True when answered.
bool StoreServer::Impl::try_complete(int fd, Conn& c) {
  const Waiter& w = *c.waiter;
  for (const auto& k : w.keys) {
    if (!data.contains(k)) {
      return false;
    }
  }
  if (w.is_get) {
    queue(c, protocol::reply::ok_value(data.at(w.keys[0])));
  } else {
    queue(c, ok());
  }
  unpark(fd, c);
  return true;
}

void StoreServer::Impl::check_store_room(const std::string& key, size_t value_size) {
  auto it = data.find(key);
  if (it == data.end() && data.size() >= protocol::k_max_store_keys) {
    throw protocol::ProtocolError("the store is full (" +
                                  std::to_string(protocol::k_max_store_keys) + " keys)");
  }
  const size_t old = it == data.end() ? 0 : key.size() + it->second.size();
  if (data_bytes - old + key.size() + value_size > protocol::k_max_store_bytes) {
    throw protocol::ProtocolError("the store is full (" +
                                  std::to_string(protocol::k_max_store_bytes) + " bytes)");
  }
}

void StoreServer::Impl::store_value(const std::string& key, std::string value) {
  auto [it, inserted] = data.try_emplace(key);
  data_bytes -= inserted ? 0 : key.size() + it->second.size();
  it->second = std::move(value);
  data_bytes += key.size() + it->second.size();
}

void StoreServer::Impl::set_key(const std::string& key, std::string value) {
  store_value(key, std::move(value));
  auto it = watchers.find(key);
  if (it == watchers.end()) {
    return;
  }
  std::vector<int> waiting(it->second.begin(), it->second.end());
  for (int fd : waiting) {
    auto cit = conns.find(fd);
    if (cit != conns.end() && cit->second.waiter && try_complete(fd, cit->second)) {
      woken.push_back(fd);  // its pipelined requests go on from the loop
    }
  }
}

void StoreServer::Impl::handle(int fd, Conn& c, std::string_view body) {
  protocol::Decoder d(body);
  const auto op = static_cast<Op>(d.u8());
  if (!c.hello && op != Op::k_hello) {
    throw protocol::ProtocolError("the first message must be HELLO");
  }
  if (c.hello && !c.authed && op != Op::k_auth) {
    warn_peer(c, "a client without the job's token");
    throw protocol::ProtocolError(
        "this store admits only the job's nodes: give the job's token (--rdzv-token-file or "
        "DDPLAUNCH_RDZV_TOKEN)");
  }
  auto timeout = [&d]() -> std::optional<Clock::time_point> {
    uint32_t ms = d.u32();
    if (ms == 0) {
      return std::nullopt;
    }
    return Clock::now() + std::chrono::milliseconds(ms);
  };
  switch (op) {
    case Op::k_hello: {
      uint32_t magic = d.u32();
      uint16_t version = d.u16();
      if (magic != protocol::k_magic) {
        throw protocol::ProtocolError("not a ddplaunch store client (bad magic number)");
      }
      if (version != protocol::k_version) {
        throw protocol::ProtocolError("protocol version mismatch: this store speaks version " +
                                      std::to_string(protocol::k_version) +
                                      ", the client version " + std::to_string(version) +
                                      "; run the same ddplaunch version on every node");
      }
      c.client_nonce = d.bytes(256);
      c.hello = true;
      if (options.token.empty()) {
        c.authed = true;
        queue(c, protocol::reply::ok_hello(false, "", ""));
      } else {
        c.server_nonce = auth::random_nonce();
        queue(c,
              protocol::reply::ok_hello(
                  true, c.server_nonce,
                  auth::server_proof(options.token, c.client_nonce, c.server_nonce),
                  options.worker_token.empty()
                      ? std::string()
                      : auth::server_proof(options.worker_token, c.client_nonce, c.server_nonce)));
      }
      return;
    }
    case Op::k_auth: {
      const std::string proof = d.bytes(256);
      if (c.authed || options.token.empty()) {
        throw protocol::ProtocolError("AUTH out of turn");
      }
      const bool job = auth::same_proof(
          proof, auth::client_proof(options.token, c.client_nonce, c.server_nonce));
      const bool worker =
          !options.worker_token.empty() &&
          auth::same_proof(
              proof, auth::client_proof(options.worker_token, c.client_nonce, c.server_nonce));
      if (!job && !worker) {
        warn_peer(c, "a client with a different job token");
        throw protocol::ProtocolError(
            "wrong job token: this store belongs to another job, or the nodes were given "
            "different tokens");
      }
      c.authed = true;
      queue(c, ok());
      return;
    }
    case Op::k_set: {
      auto key = d.bytes(protocol::k_max_key);
      auto value = d.bytes(protocol::k_max_value);
      check_store_room(key, value.size());
      queue(c, ok());
      set_key(key, std::move(value));
      return;
    }
    case Op::k_get: {
      Waiter w{true, {d.bytes(protocol::k_max_key)}, timeout()};
      park(fd, c, std::move(w));
      try_complete(fd, c);
      return;
    }
    case Op::k_add: {
      auto key = d.bytes(protocol::k_max_key);
      int64_t delta = d.i64();
      int64_t current = 0;
      if (auto it = data.find(key); it != data.end()) {
        auto [p, ec] =
            std::from_chars(it->second.data(), it->second.data() + it->second.size(), current);
        if (ec != std::errc() || p != it->second.data() + it->second.size()) {
          throw protocol::ProtocolError("ADD on key '" + key + "' whose value is not a number");
        }
      }
      if (__builtin_add_overflow(current, delta, &current)) {
        throw protocol::ProtocolError("ADD on key '" + key + "' overflows a 64-bit integer");
      }
      check_store_room(key, 20);
      queue(c, protocol::reply::ok_i64(current));
      set_key(key, std::to_string(current));
      return;
    }
    case Op::k_cas: {
      auto key = d.bytes(protocol::k_max_key);
      bool expect_absent = d.u8() != 0;
      auto expected = d.bytes(protocol::k_max_value);
      auto desired = d.bytes(protocol::k_max_value);
      auto it = data.find(key);
      bool swap = expect_absent ? it == data.end() : (it != data.end() && it->second == expected);
      if (swap) {
        check_store_room(key, desired.size());
      }
      std::string current = swap ? desired : (it == data.end() ? std::string() : it->second);
      queue(c, protocol::reply::ok_cas(swap, current));
      if (swap) {
        set_key(key, std::move(desired));
      }
      return;
    }
    case Op::k_delete: {
      auto it = data.find(d.bytes(protocol::k_max_key));
      const bool existed = it != data.end();
      if (existed) {
        data_bytes -= it->first.size() + it->second.size();
        data.erase(it);
      }
      queue(c, protocol::reply::ok_u8(existed ? 1 : 0));
      return;
    }
    case Op::k_wait: {
      Waiter w{false, d.keys(), std::nullopt};
      w.deadline = timeout();
      park(fd, c, std::move(w));
      try_complete(fd, c);
      return;
    }
    case Op::k_check: {
      auto keys = d.keys();
      bool all = std::all_of(keys.begin(), keys.end(), [&](auto& k) { return data.contains(k); });
      queue(c, protocol::reply::ok_u8(all ? 1 : 0));
      return;
    }
    case Op::k_num_keys:
      queue(c, protocol::reply::ok_u64(data.size()));
      return;
    case Op::k_multi_get: {
      auto keys = d.keys();
      size_t size = 0;
      for (const auto& k : keys) {
        auto it = data.find(k);
        size += 5 + (it != data.end() ? it->second.size() : 0);
      }
      if (size > protocol::k_max_reply) {
        throw protocol::ProtocolError(
            "MULTI_GET would reply with " + std::to_string(size) + " bytes, over the limit of " +
            std::to_string(protocol::k_max_reply) + "; ask for fewer keys");
      }
      protocol::Encoder e;
      e.u8(static_cast<uint8_t>(Status::k_ok));
      for (const auto& k : keys) {
        auto it = data.find(k);
        e.u8(it != data.end() ? 1 : 0).bytes(it != data.end() ? it->second : "");
      }
      queue(c, e.finish());
      return;
    }
    case Op::k_ping:
      queue(c, ok());
      return;
    case Op::k_keys: {
      const auto prefix = d.bytes(protocol::k_max_key);
      std::vector<const std::string*> found;
      size_t size = 5;
      for (const auto& [key, value] : data) {
        if (key.starts_with(prefix)) {
          found.push_back(&key);
          size += 4 + key.size();
        }
      }
      if (size > protocol::k_max_reply) {
        throw protocol::ProtocolError(
            "KEYS would reply with " + std::to_string(size) + " bytes, over the limit of " +
            std::to_string(protocol::k_max_reply) + "; give a longer prefix");
      }
      std::sort(found.begin(), found.end(),
                [](const std::string* a, const std::string* b) { return *a < *b; });
      protocol::Encoder e;
      e.u8(static_cast<uint8_t>(Status::k_ok)).u32(static_cast<uint32_t>(found.size()));
      for (const auto* key : found) {
        e.bytes(*key);
      }
      queue(c, e.finish());
      return;
    }
    case Op::k_on_close: {
      auto key = d.bytes(protocol::k_max_key);
      auto value = d.bytes(protocol::k_max_on_close);
      if (key.empty()) {
        c.on_close.reset();
      } else {
        c.on_close.emplace(std::move(key), std::move(value));
      }
      queue(c, ok());
      return;
    }
  }
  throw protocol::ProtocolError("unknown operation " + std::to_string(static_cast<int>(op)));
}

void StoreServer::Impl::process(int fd) {
  Conn& c = conns.at(fd);
  try {
    // Replies not yet read hold further requests back: a client that only
    // sends costs at most the high-water mark plus one reply.
    while (!c.closing && !c.waiter && c.out.size() < k_out_high_water) {
      auto len = protocol::complete_frame(c.in);
      if (!len) {
        break;
      }
      std::string body = c.in.substr(4, *len);
      c.in.erase(0, 4 + *len);
      handle(fd, c, body);
    }
  } catch (const protocol::ProtocolError& e) {
    unpark(fd, c);
    error(c, e.what());
  }
  flush(fd);
}

void StoreServer::Impl::on_readable(int fd) {
  std::array<char, 64 * 1024> buf;
  Conn& c = conns.at(fd);
  while (c.reading) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      // The client went away: what it sent before still counts (a SET just
      // before exiting); any parked request goes with it.
      c.reading = false;
      process(fd);
      close_conn(fd);
      return;
    }
    if (n < 0) {
      break;
    }
    c.in.append(buf.data(), static_cast<size_t>(n));
    c.last_input = Clock::now();
    if (c.in.size() >= protocol::k_max_frame + 4) {
      break;
    }
  }
  process(fd);
}

void StoreServer::Impl::loop() {
  std::array<epoll_event, 256> events;
  while (true) {
    std::optional<Clock::time_point> next =
        conns.empty() ? std::nullopt : std::optional(next_sweep);
    if (!deadlines.empty() && (!next || deadlines.begin()->first < *next)) {
      next = deadlines.begin()->first;
    }
    if (accept_resume && (!next || *accept_resume < *next)) {
      next = accept_resume;
    }
    int timeout_ms = -1;
    if (next) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
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
      run_woken();
    }
    const auto now = Clock::now();
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      int fd = deadlines.begin()->second;
      Conn& c = conns.at(fd);
      unpark(fd, c);
      queue(c, protocol::reply::timeout());
      process(fd);
      run_woken();
    }
    if (accept_resume && *accept_resume <= now) {
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
  raise_fd_limit();
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
  s.thread = std::thread([this] { m_impl->loop(); });
}

StoreServer::~StoreServer() {
  stop();
}

int StoreServer::port() const {
  return m_impl->port;
}

void StoreServer::stop() {
  if (m_impl->stopped) {
    return;
  }
  m_impl->stopped = true;
  uint64_t one = 1;
  ssize_t ignored = ::write(m_impl->wake.get(), &one, sizeof(one));
  (void)ignored;
  m_impl->thread.join();
  m_impl->conns.clear();
  m_impl->listener.close();
}

}  // namespace ddplaunch
