#include "store/server.hpp"

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

#include "posix/error.hpp"
#include "posix/fd.hpp"
#include "posix/net.hpp"
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
  std::string in;
  std::string out;
  bool hello = false;
  bool closing = false;  // close once `out` is flushed
  bool reading = true;
  std::optional<Waiter> waiter;
};

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
  posix::Fd listener;
  posix::Fd epoll;
  posix::Fd wake;  // eventfd: stop()
  int port = 0;
  std::thread thread;
  bool stopped = false;
  std::unordered_map<int, Conn> conns;
  std::unordered_map<std::string, std::string> data;
  std::unordered_map<std::string, std::set<int>> watchers;  // key -> waiting conns
  std::set<std::pair<Clock::time_point, int>> deadlines;

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
      return;  // EAGAIN, or EMFILE: the client retries
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conns[fd].fd = posix::Fd(fd);
    epoll_event ev = {};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev);
  }
}

void StoreServer::Impl::close_conn(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end()) {
    return;
  }
  unpark(fd, it->second);
  epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
  conns.erase(it);
}

void StoreServer::Impl::error(Conn& c, const std::string& message) {
  c.out += protocol::reply::error(message);
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
  }
  if (c.out.empty() && c.closing) {
    close_conn(fd);
    return;
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
    c.out += protocol::reply::ok_value(data.at(w.keys[0]));
  } else {
    c.out += ok();
  }
  unpark(fd, c);
  return true;
}

void StoreServer::Impl::set_key(const std::string& key, std::string value) {
  data[key] = std::move(value);
  auto it = watchers.find(key);
  if (it == watchers.end()) {
    return;
  }
  std::vector<int> waiting(it->second.begin(), it->second.end());
  for (int fd : waiting) {
    auto cit = conns.find(fd);
    if (cit == conns.end()) {
      continue;
    }
    Conn& c = cit->second;
    if (c.waiter && try_complete(fd, c)) {
      process(fd);  // its pipelined requests may go on now
    }
  }
}

void StoreServer::Impl::handle(int fd, Conn& c, std::string_view body) {
  protocol::Decoder d(body);
  const auto op = static_cast<Op>(d.u8());
  if (!c.hello && op != Op::k_hello) {
    throw protocol::ProtocolError("the first message must be HELLO");
  }
  auto timeout = [&d]() -> std::optional<Clock::time_point> {
    uint32_t ms = d.u32();
    if (ms == 0) {
      return std::nullopt;
    }
    return Clock::now() + std::chrono::milliseconds(ms);
  };
  auto check_capacity = [this](const std::string& key) {
    if (!data.contains(key) && data.size() >= protocol::k_max_store_keys) {
      throw protocol::ProtocolError("the store is full (" +
                                    std::to_string(protocol::k_max_store_keys) + " keys)");
    }
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
      c.hello = true;
      c.out += protocol::reply::ok_u16(protocol::k_version);
      return;
    }
    case Op::k_set: {
      auto key = d.bytes(protocol::k_max_key);
      auto value = d.bytes(protocol::k_max_value);
      check_capacity(key);
      c.out += ok();
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
      check_capacity(key);
      current += delta;
      c.out += protocol::reply::ok_i64(current);
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
        check_capacity(key);
      }
      std::string current = swap ? desired : (it == data.end() ? std::string() : it->second);
      c.out += protocol::reply::ok_cas(swap, current);
      if (swap) {
        set_key(key, std::move(desired));
      }
      return;
    }
    case Op::k_delete: {
      bool existed = data.erase(d.bytes(protocol::k_max_key)) > 0;
      c.out += protocol::reply::ok_u8(existed ? 1 : 0);
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
      c.out += protocol::reply::ok_u8(all ? 1 : 0);
      return;
    }
    case Op::k_num_keys:
      c.out += protocol::reply::ok_u64(data.size());
      return;
    case Op::k_multi_get: {
      auto keys = d.keys();
      protocol::Encoder e;
      e.u8(static_cast<uint8_t>(Status::k_ok));
      for (const auto& k : keys) {
        auto it = data.find(k);
        e.u8(it != data.end() ? 1 : 0).bytes(it != data.end() ? it->second : "");
      }
      c.out += e.finish();
      return;
    }
    case Op::k_ping:
      c.out += ok();
      return;
  }
  throw protocol::ProtocolError("unknown operation " + std::to_string(static_cast<int>(op)));
}

void StoreServer::Impl::process(int fd) {
  Conn& c = conns.at(fd);
  try {
    while (!c.closing && !c.waiter) {
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
    if (c.in.size() >= protocol::k_max_frame + 4) {
      break;
    }
  }
  process(fd);
}

void StoreServer::Impl::loop() {
  std::array<epoll_event, 256> events;
  while (true) {
    int timeout_ms = -1;
    if (!deadlines.empty()) {
      auto ms =
          std::chrono::ceil<std::chrono::milliseconds>(deadlines.begin()->first - Clock::now())
              .count();
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
    const auto now = Clock::now();
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      int fd = deadlines.begin()->second;
      Conn& c = conns.at(fd);
      unpark(fd, c);
      c.out += protocol::reply::timeout();
      process(fd);
    }
  }
}

StoreServer::StoreServer(const std::string& host, int port) : m_impl(std::make_unique<Impl>()) {
  raise_fd_limit();
  Impl& s = *m_impl;
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
