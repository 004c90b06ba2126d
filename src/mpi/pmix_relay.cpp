#include "mpi/pmix_relay.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "log.hpp"
#include "posix/net.hpp"

namespace ddplaunch {

namespace {

constexpr uint64_t k_listener_tag = 0;
constexpr uint64_t k_server_bit = 1;  // tag = id << 1 | side
constexpr size_t k_read_bytes = 64u << 10;

}  // namespace

PmixRelay::PmixRelay() : m_listener(posix::listen_tcp("127.0.0.1", 0)) {
  m_port = posix::local_port(m_listener.get());
  m_loop.set(m_listener.get(), EPOLLIN, k_listener_tag);
}

void PmixRelay::set_server(const std::string& host, int port) {
  m_server_host = host;
  m_server_port = port;
  for (auto it = m_pairs.begin(); it != m_pairs.end();) {
    if (!it->second.server.fd && !connect_server(it->second)) {
      m_loop.remove(it->second.client.fd.get());
      it = m_pairs.erase(it);  // its client sees the connection close
    } else {
      update(it->first, it->second);
      ++it;
    }
  }
}

void PmixRelay::refuse_clients() {
  m_refused = true;
  for (auto& [id, pair] : m_pairs) {
    m_loop.remove(pair.client.fd.get());
    m_loop.remove(pair.server.fd.get());
  }
  m_pairs.clear();
}

bool PmixRelay::connect_server(Pair& pair) {
  auto fd = posix::start_connect(m_server_host, m_server_port);
  if (!fd) {
    log::warn("cannot reach this node's PMIx server at {}:{}: {}", m_server_host, m_server_port,
              std::strerror(errno));
    return false;
  }
  pair.server.fd = std::move(*fd);
  pair.connecting = true;
  return true;
}

void PmixRelay::pump() {
  // One pass: what is still ready keeps the relay's epoll readable, and the
  // agent's loop comes back to it after its other work.
  for (const auto& r : m_loop.wait(std::chrono::steady_clock::time_point{})) {
    handle(r.tag, r.events);
  }
}

void PmixRelay::handle(uint64_t tag, uint32_t events) {
  if (tag == k_listener_tag) {
    accept_clients();
    return;
  }
  const uint64_t id = tag >> 1;
  const auto it = m_pairs.find(id);
  if (it == m_pairs.end()) {
    return;  // closed earlier in this batch
  }
  Pair& pair = it->second;
  const bool server_side = (tag & k_server_bit) != 0;
  Side& side = server_side ? pair.server : pair.client;
  Side& other = server_side ? pair.client : pair.server;
  if (server_side && pair.connecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) {
      return;
    }
    if (const int error = posix::connect_error(side.fd.get()); error != 0) {
      log::warn("cannot connect to this node's PMIx server: {}", std::strerror(error));
      close_pair(id);
      return;
    }
    pair.connecting = false;
  }
  bool alive = true;
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && (side.events & EPOLLIN) != 0) {
    alive = read_side(side, other);
  }
  // What is queued either way goes out now (to the server only once it is
  // connected; before, a client's bytes wait for it).
  if (alive && !pair.connecting) {
    alive = flush(pair.server, pair.client) && flush(pair.client, pair.server);
  } else if (alive) {
    alive = flush(pair.client, pair.server);
  }
  const bool done = pair.client.eof && pair.server.eof && pair.client.shut && pair.server.shut;
  if (!alive || done) {
    close_pair(id);
    return;
  }
  update(id, pair);
}

void PmixRelay::accept_clients() {
  for (;;) {
    posix::Fd fd(::accept4(m_listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      return;  // EAGAIN; or out of descriptors: tried again when it is readable next
    }
    if (m_refused) {
      continue;  // closed: no server will come
    }
    const uint64_t id = m_next_id++;
    Pair& pair = m_pairs[id];
    pair.client.fd = std::move(fd);
    if (m_server_port != 0 && !connect_server(pair)) {
      m_pairs.erase(id);
      continue;
    }
    update(id, pair);
    if (m_server_port == 0 && m_first_client) {
      auto first = std::move(m_first_client);
      m_first_client = nullptr;
      first();
    }
  }
}

bool PmixRelay::read_side(Side& from, Side& to) {
  if (from.eof) {
    return true;
  }
  char buffer[k_read_bytes];
  for (;;) {
    const size_t queued = to.out.size() - to.sent;
    if (queued >= k_buffer_bytes) {
      return true;  // the other side catches up first
    }
    const ssize_t n =
        ::read(from.fd.get(), buffer, std::min(sizeof buffer, k_buffer_bytes - queued));
    if (n > 0) {
      if (to.sent == to.out.size()) {
        to.out.clear();
        to.sent = 0;
      }
      to.out.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      from.eof = true;
      return true;
    }
    if (errno == EINTR) {
      continue;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK;  // a reset ends the pair
  }
}

bool PmixRelay::flush(Side& to, const Side& from) {
  if (!to.fd) {
    return true;
  }
  while (to.sent < to.out.size()) {
    const ssize_t n =
        ::send(to.fd.get(), to.out.data() + to.sent, to.out.size() - to.sent, MSG_NOSIGNAL);
    if (n > 0) {
      to.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    }
    return false;
  }
  to.out.clear();
  to.sent = 0;
  if (from.eof && !to.shut) {
    ::shutdown(to.fd.get(), SHUT_WR);  // the other side's end, passed on
    to.shut = true;
  }
  return true;
}

void PmixRelay::update(uint64_t id, Pair& pair) {
  auto watch = [this](Side& side, Side& other, uint64_t tag, bool connecting) {
    if (!side.fd) {
      return;
    }
    uint32_t events = 0;
    if (connecting) {
      events = EPOLLOUT;
    } else {
      if (!side.eof && other.out.size() - other.sent < k_buffer_bytes) {
        events |= EPOLLIN;
      }
      if (side.sent < side.out.size()) {
        events |= EPOLLOUT;
      }
    }
    // A socket watched for nothing leaves the loop: epoll reports a hang-up
    // whatever is asked, and one the relay cannot act on yet would spin.
    if (events == 0) {
      m_loop.remove(side.fd.get());
    } else if (events != side.events || !m_loop.contains(side.fd.get())) {
      m_loop.set(side.fd.get(), events, tag);
    }
    side.events = events;
  };
  watch(pair.client, pair.server, id << 1, false);
  watch(pair.server, pair.client, id << 1 | k_server_bit, pair.connecting);
}

void PmixRelay::close_pair(uint64_t id) {
  const auto it = m_pairs.find(id);
  if (it == m_pairs.end()) {
    return;
  }
  m_loop.remove(it->second.client.fd.get());
  m_loop.remove(it->second.server.fd.get());
  m_pairs.erase(it);
}

}  // namespace ddplaunch
