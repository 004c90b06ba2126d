#include "agent/reach_probe.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "log.hpp"
#include "posix/net.hpp"

namespace ddplaunch {

namespace {

// Why a connect failed, in words that point at the cause.
std::string connect_failure(int err) {
  switch (err) {
    case ECONNREFUSED:
      return "connection refused (a firewall rejects it, or nothing listens there)";
    case EHOSTUNREACH:
    case ENETUNREACH:
      return std::string(std::strerror(err)) + " (no route: check the address and the interface)";
    default:
      return std::strerror(err);
  }
}

// Why a connect could not even start here: this host's own limits (no
// descriptor, no memory), which say nothing about the path.
bool local_failure(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

}  // namespace

int ReachProbe::listen_on() {
  // Peers dial the address they reach this node by (node 0's MASTER_ADDR,
  // another node's advertised address). Its backlog holds every peer that
  // probes it at once (the sample is bounded).
  m_listener = posix::listen_anywhere(0, SOMAXCONN);
  return posix::local_port(m_listener.get());
}

bool ReachProbe::hold_port(int port) {
  try {
    m_held = posix::listen_anywhere(port, SOMAXCONN);
    return true;
  } catch (const std::system_error&) {
    return false;
  }
}

void ReachProbe::release() {
  m_held.close();
  m_listener.close();
}

void ReachProbe::start(std::vector<ProbeTarget> targets, TimePoint deadline, Done done) {
  m_done = std::move(done);
  m_deadline = deadline;
  m_timeout_s = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
  m_connects.clear();
  m_failures.clear();
  m_in_flight = 0;
  for (auto& target : targets) {
    m_connects.push_back(Connect{std::move(target), posix::Fd()});
  }
  if (!m_loop) {
    try {
      m_loop.emplace();
    } catch (const std::system_error& e) {
      log::warn("network preflight: this node probes nothing: {}", e.what());
      m_connects.clear();
    }
  }
  for (size_t i = 0; i < m_connects.size(); ++i) {
    auto& c = m_connects[i];
    auto fd = posix::start_connect(c.target.addr, c.target.port);
    if (!fd && local_failure(errno)) {
      log::warn("network preflight: node {} ({}) is not probed: {}", c.target.node, c.target.host,
                std::strerror(errno));
      continue;
    }
    if (!fd) {
      m_failures.push_back(ProbeFailure{c.target, connect_failure(errno)});
      continue;
    }
    c.fd = std::move(*fd);
    m_loop->set(c.fd.get(), EPOLLOUT, i);
    ++m_in_flight;
  }
  finish_if_done();
}

ReachProbe::ReachProbe(posix::EventLoop& loop) : m_outer(&loop), m_tag(loop.attach(*this)) {}

ReachProbe::~ReachProbe() {
  if (m_outer == nullptr) {
    return;
  }
  if (m_watched >= 0) {
    m_outer->remove(m_watched);
  }
  m_outer->detach(*this);
}

void ReachProbe::prepare() {
  const int fd = this->fd();
  if (fd >= 0 && m_watched < 0) {
    m_outer->set(fd, EPOLLIN, m_tag);
    m_watched = fd;
  } else if (fd < 0 && m_watched >= 0) {
    m_outer->remove(m_watched);
    m_watched = -1;
  }
}

void ReachProbe::on_ready(uint64_t, uint32_t) {
  on_ready(std::chrono::steady_clock::now());
}

void ReachProbe::on_ready(TimePoint) {
  for (const auto& ready : m_loop->wait(std::chrono::steady_clock::now())) {
    const int err = posix::connect_error(m_connects.at(ready.tag).fd.get());
    end(ready.tag, err == 0 ? std::string() : connect_failure(err));
  }
  finish_if_done();
}

std::optional<NetworkProbe::TimePoint> ReachProbe::deadline() const {
  if (m_in_flight == 0) {
    return std::nullopt;
  }
  return m_deadline;
}

void ReachProbe::on_time(TimePoint now) {
  if (m_in_flight == 0 || now < m_deadline) {
    return;
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3g", std::max(m_timeout_s, 0.0));
  for (size_t i = 0; i < m_connects.size(); ++i) {
    if (m_connects[i].fd) {
      end(i, std::string("no answer within ") + seconds +
                 " s (a firewall dropping the packets, or the host is down)");
    }
  }
  finish_if_done();
}

void ReachProbe::end(size_t i, const std::string& error) {
  auto& c = m_connects.at(i);
  if (!c.fd) {
    return;
  }
  m_loop->remove(c.fd.get());
  const linger reset{1, 0};
  (void)::setsockopt(c.fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  c.fd.close();
  --m_in_flight;
  if (!error.empty()) {
    m_failures.push_back(ProbeFailure{c.target, error});
  }
}

void ReachProbe::finish_if_done() {
  if (m_in_flight == 0 && m_done) {
    auto done = std::exchange(m_done, nullptr);
    done(std::exchange(m_failures, {}));
  }
}

}  // namespace ddplaunch
