#include "store/async_client.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "posix/net.hpp"

namespace ddplaunch {

namespace {

using protocol::Reply;
using protocol::Status;

constexpr auto k_max_backoff = std::chrono::milliseconds(1000);
constexpr auto k_attempt_timeout = std::chrono::milliseconds(5000);

uint32_t to_ms(AsyncClient::Duration d) {
  return static_cast<uint32_t>(std::clamp<long long>(d.count(), 0, UINT32_MAX));
}

}  // namespace

AsyncClient::AsyncClient(std::string host, int port, Duration connect_timeout, Duration io_timeout,
                         TimePoint now)
    : m_host(std::move(host)),
      m_port(port),
      m_where(m_host + ":" + std::to_string(port)),
      m_io_timeout(io_timeout),
      m_connect_deadline(now + connect_timeout) {
  request(protocol::request::hello(), Duration(0), [](const Reply&) {});
  try_connect(now);
}

uint32_t AsyncClient::events() const {
  if (!m_fd) {
    return 0;
  }
  if (m_state == State::k_connecting) {
    return EPOLLOUT;
  }
  return EPOLLIN | EPOLLRDHUP | (m_out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
}

std::optional<AsyncClient::TimePoint> AsyncClient::deadline() const {
  switch (m_state) {
    case State::k_connecting:
      return m_in_progress ? std::optional(m_attempt_deadline) : m_retry_at;
    case State::k_ready: {
      std::optional<TimePoint> first;
      for (const auto& p : m_pending) {
        if (p.deadline && (!first || *p.deadline < *first)) {
          first = p.deadline;
        }
      }
      return first;
    }
    case State::k_failed:
      break;
  }
  return std::nullopt;
}

void AsyncClient::try_connect(TimePoint now) {
  ++m_attempts;
  m_retry_at.reset();
  auto fd = posix::start_connect(m_host, m_port);
  if (fd) {
    m_fd = std::move(*fd);
    m_in_progress = true;
    m_attempt_deadline = std::min(now + k_attempt_timeout, m_connect_deadline);
    return;
  }
  m_last_errno = errno;
  if (now + m_backoff >= m_connect_deadline) {
    fail("cannot reach the store at " + m_where + " (" + std::strerror(m_last_errno) + ")");
    return;
  }
  m_retry_at = now + m_backoff;
  m_backoff = std::min(m_backoff * 2, Duration(k_max_backoff));
}

void AsyncClient::connected(TimePoint now) {
  m_state = State::k_ready;
  m_in_progress = false;
  flush(now);
}

void AsyncClient::on_ready(uint32_t events, TimePoint now) {
  if (m_state == State::k_connecting && m_in_progress) {
    const int err =
        (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0 ? posix::connect_error(m_fd.get()) : 0;
    if ((events & EPOLLOUT) != 0 && err == 0) {
      connected(now);
      return;
    }
    if (err != 0 || (events & (EPOLLERR | EPOLLHUP)) != 0) {
      m_fd.close();
      m_in_progress = false;
      m_last_errno = err != 0 ? err : ECONNREFUSED;
      if (now + m_backoff >= m_connect_deadline) {
        fail("cannot reach the store at " + m_where + " (" + std::strerror(m_last_errno) + ")");
        return;
      }
      m_retry_at = now + m_backoff;
      m_backoff = std::min(m_backoff * 2, Duration(k_max_backoff));
    }
    return;
  }
  if (m_state != State::k_ready) {
    return;
  }
  if ((events & EPOLLOUT) != 0) {
    flush(now);
  }
  if (m_state == State::k_ready && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    receive();
  }
}

void AsyncClient::on_time(TimePoint now) {
  if (m_state == State::k_connecting) {
    if (m_in_progress && now >= m_attempt_deadline) {
      m_fd.close();
      m_in_progress = false;
      m_last_errno = ETIMEDOUT;
      if (now >= m_connect_deadline) {
        fail("cannot reach the store at " + m_where + " (" + std::strerror(m_last_errno) + ")");
        return;
      }
      m_retry_at = now;
    }
    if (!m_in_progress && m_retry_at && now >= *m_retry_at) {
      try_connect(now);
    }
    return;
  }
  if (m_state == State::k_ready) {
    for (const auto& p : m_pending) {
      if (p.deadline && now >= *p.deadline) {
        fail("no answer within " + std::to_string(m_io_timeout.count()) +
             " ms (the store host may be stopped or unreachable)");
        return;
      }
    }
  }
}

void AsyncClient::flush(TimePoint now) {
  while (!m_out.empty()) {
    ssize_t n = ::send(m_fd.get(), m_out.data(), m_out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno == EAGAIN) {
        break;
      }
      fail(std::string("send failed: ") + std::strerror(errno));
      return;
    }
    m_out.erase(0, static_cast<size_t>(n));
    m_sent_total += static_cast<size_t>(n);
  }
  for (auto& p : m_pending) {
    if (!p.deadline && p.end_offset <= m_sent_total && p.wait != k_forever) {
      p.deadline = now + m_io_timeout + p.wait;
    }
  }
}

void AsyncClient::receive() {
  bool closed = false;
  char buf[64 * 1024];
  while (true) {
    ssize_t n = ::recv(m_fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      m_in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno != EAGAIN) {
      // A reset connection: hand out what arrived, then fail.
      closed = true;
    }
    closed = closed || n == 0;
    break;
  }
  size_t offset = 0;
  while (m_state == State::k_ready) {
    std::optional<size_t> len;
    Reply reply;
    try {
      len = protocol::complete_frame(std::string_view(m_in).substr(offset));
      if (!len) {
        break;
      }
      reply = protocol::parse_reply(std::string_view(m_in).substr(offset + 4, *len));
      offset += 4 + *len;
      if (reply.status == Status::k_error) {
        fail("refused the request: " + protocol::error_message(reply));
        return;
      }
    } catch (const protocol::ProtocolError& e) {
      fail(std::string("malformed reply: ") + e.what());
      return;
    }
    if (m_pending.empty()) {
      fail("a reply nobody asked for");
      return;
    }
    Callback callback = std::move(m_pending.front().callback);
    m_pending.pop_front();
    try {
      callback(reply);
    } catch (const protocol::ProtocolError& e) {
      fail(std::string("malformed reply: ") + e.what());
      return;
    }
  }
  if (m_state != State::k_ready) {
    return;
  }
  m_in.erase(0, offset);
  if (closed) {
    fail("connection closed by the store (its agent exited?)");
  }
}

void AsyncClient::fail(const std::string& why) {
  if (m_state == State::k_failed) {
    return;
  }
  m_state = State::k_failed;
  m_error = why.starts_with("cannot reach") ? why : "store at " + m_where + ": " + why;
  m_fd.close();
  m_pending.clear();
  m_out.clear();
  if (m_on_failure) {
    m_on_failure(m_error);
  }
}

void AsyncClient::request(std::string frame, Duration wait, Callback callback) {
  if (m_state == State::k_failed) {
    return;
  }
  const bool was_empty = m_out.empty();
  m_queued_total += frame.size();
  m_out += frame;
  m_pending.push_back(Pending{std::move(callback), wait, std::nullopt, m_queued_total});
  if (m_state == State::k_ready && was_empty) {
    flush(Clock::now());
  }
}

void AsyncClient::set(const std::string& key, const std::string& value,
                      std::function<void()> done) {
  request(protocol::request::set(key, value), Duration(0),
          [done = std::move(done)](const Reply&) { done(); });
}

void AsyncClient::get(const std::string& key, Duration timeout,
                      std::function<void(std::optional<std::string>)> done) {
  request(protocol::request::get(key, to_ms(timeout)), timeout.count() == 0 ? k_forever : timeout,
          [done = std::move(done)](const Reply& r) {
            done(r.status == Status::k_ok ? std::optional(protocol::read_value(r)) : std::nullopt);
          });
}

void AsyncClient::add(const std::string& key, int64_t delta, std::function<void(int64_t)> done) {
  request(protocol::request::add(key, delta), Duration(0),
          [done = std::move(done)](const Reply& r) { done(protocol::read_i64(r)); });
}

void AsyncClient::compare_set(const std::string& key, const std::optional<std::string>& expected,
                              const std::string& desired, std::function<void(std::string)> done) {
  request(protocol::request::compare_set(key, expected, desired), Duration(0),
          [done = std::move(done)](const Reply& r) { done(protocol::read_cas_current(r)); });
}

void AsyncClient::wait(const std::vector<std::string>& keys, Duration timeout,
                       std::function<void(bool)> done) {
  request(protocol::request::wait(keys, to_ms(timeout)), timeout.count() == 0 ? k_forever : timeout,
          [done = std::move(done)](const Reply& r) { done(r.status == Status::k_ok); });
}

void AsyncClient::multi_get(const std::vector<std::string>& keys,
                            std::function<void(std::vector<std::optional<std::string>>)> done) {
  const size_t count = keys.size();
  request(
      protocol::request::multi_get(keys), Duration(0),
      [done = std::move(done), count](const Reply& r) { done(protocol::read_multi(r, count)); });
}

}  // namespace ddplaunch
