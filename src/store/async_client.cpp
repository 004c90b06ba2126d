#include "store/async_client.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "posix/net.hpp"
#include "store/auth.hpp"

namespace ddplaunch {

namespace {

using protocol::Reply;
using protocol::Status;

constexpr auto k_max_backoff = std::chrono::milliseconds(1000);
constexpr auto k_attempt_timeout = std::chrono::milliseconds(5000);
constexpr int k_max_silent_closes = 20;

}  // namespace

AsyncClient::AsyncClient(std::string host, int port, Duration connect_timeout, Duration io_timeout,
                         TimePoint now, std::string token)
    : m_host(std::move(host)),
      m_port(port),
      m_where(m_host + ":" + std::to_string(port)),
      m_io_timeout(io_timeout),
      m_connect_deadline(now + connect_timeout),
      m_token(std::move(token)),
      m_client_nonce(auth::random_nonce()) {
  enqueue(0, protocol::request::hello(m_client_nonce), Duration(0),
          [this](const Reply& r) { on_hello(r); });
  try_connect(now);
}

void AsyncClient::on_hello(const Reply& reply) {
  const protocol::HelloReply hello = protocol::read_hello(reply);
  m_hello_answered = true;
  if (hello.auth && m_token.empty()) {
    fail(Failure::k_refused,
         "this store admits only its job's nodes: give the job's token with --rdzv-token-file or "
         "DDPLAUNCH_RDZV_TOKEN");
    return;
  }
  if (!hello.auth && !m_token.empty()) {
    fail(Failure::k_refused,
         "this node has a job token but the store does not check one: give node 0 the same "
         "--rdzv-token-file or DDPLAUNCH_RDZV_TOKEN");
    return;
  }
  if (hello.auth) {
    // The store proves it knows the job's token, or the workers' credential.
    const std::string expected = auth::server_proof(m_token, m_client_nonce, hello.server_nonce);
    if (!auth::same_proof(hello.server_proof, expected) &&
        !(!hello.worker_proof.empty() && auth::same_proof(hello.worker_proof, expected))) {
      fail(Failure::k_refused,
           "the store does not know this job's token: it belongs to another job, or node 0 was "
           "given a different token");
      return;
    }
    // AUTH is answered before anything else is sent: the store may have no
    // slot free (BUSY: this node tries again), and the session starts there.
    m_server_nonce = hello.server_nonce;
    enqueue(
        next_id(),
        protocol::request::auth(auth::client_proof(m_token, m_client_nonce, hello.server_nonce)),
        Duration(0), [this](const Reply&) { on_auth(); });
    return;
  }
  on_auth();
}

// The handshake is done: with a token, every frame from here on is sealed
// (store/auth.hpp), and the requests made meanwhile go out.
void AsyncClient::on_auth() {
  if (!m_token.empty()) {
    const auth::SessionKeys keys = auth::session_keys(m_token, m_client_nonce, m_server_nonce);
    m_mac_out.emplace(keys.client_to_server);
    m_mac_in.emplace(keys.server_to_client);
  }
  m_handshaken = true;
  auto held = std::move(m_held);
  m_held.clear();
  for (auto& h : held) {
    enqueue(next_id(), std::move(h.frame), h.wait, std::move(h.callback));
  }
}

uint32_t AsyncClient::events() const {
  if (!m_fd) {
    return 0;
  }
  if (m_state == State::k_connecting) {
    return EPOLLOUT;
  }
  const bool sending = !m_out.empty() && !m_write_failed;
  return EPOLLIN | EPOLLRDHUP | (sending ? static_cast<uint32_t>(EPOLLOUT) : 0u);
}

std::optional<AsyncClient::TimePoint> AsyncClient::deadline() const {
  switch (m_state) {
    case State::k_connecting:
      return m_in_progress ? std::optional(m_attempt_deadline) : m_retry_at;
    case State::k_ready:
      if (m_deadlines.empty()) {
        return std::nullopt;
      }
      return m_deadlines.begin()->first;
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
    unreachable();
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
        unreachable();
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
    receive(now);
  }
}

void AsyncClient::on_time(TimePoint now) {
  if (m_state == State::k_connecting) {
    if (m_in_progress && now >= m_attempt_deadline) {
      m_fd.close();
      m_in_progress = false;
      m_last_errno = ETIMEDOUT;
      if (now >= m_connect_deadline) {
        unreachable();
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
    if (!m_deadlines.empty() && now >= m_deadlines.begin()->first) {
      if (m_handshaken) {
        fail(Failure::k_lost, "no answer within " + std::to_string(m_io_timeout.count()) +
                                  " ms (the store host may be stopped or unreachable)");
      } else {
        // Not an answer, so not a refusal: the connection may wait in a
        // listen backlog that a flood of connections filled (the store
        // answers it once it accepts it), or the store host is stopped.
        // Tried again, on a new connection, until --rdzv-timeout. This one
        // is reset, not closed: the store, accepting it later, then finds
        // no HELLO from a client that left, not one without the token.
        const linger reset = {1, 0};
        (void)::setsockopt(m_fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        retry_busy("no answer to HELLO within " + std::to_string(m_io_timeout.count()) +
                       " ms (the store host is stopped or overloaded, or the program "
                       "listening there is not a ddplaunch store)",
                   now);
      }
      return;
    }
  }
}

void AsyncClient::flush(TimePoint now) {
  while (!m_out.empty() && !m_write_failed) {
    ssize_t n = ::send(m_fd.get(), m_out.data(), m_out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (errno == EAGAIN) {
        break;
      }
      if (!m_handshaken && (errno == EPIPE || errno == ECONNRESET) &&
          ++m_silent_closes < k_max_silent_closes) {
        // Closed by a store whose handshake pool is full (see receive()),
        // before this side had sent all of its handshake: tried again.
        retry_busy("the store closed the connection during the handshake", now);
        return;
      }
      if (m_handshaken && (errno == EPIPE || errno == ECONNRESET)) {
        // The store went away: what it answered before it did (the job's
        // verdict, say) is still to be read, and the read that finds the
        // end reports the loss. Nothing more is sent.
        m_write_failed = true;
        return;
      }
      fail(m_handshaken ? Failure::k_lost : Failure::k_refused,
           std::string("send failed: ") + std::strerror(errno));
      return;
    }
    m_out.erase(0, static_cast<size_t>(n));
    m_sent_total += static_cast<size_t>(n);
  }
  while (!m_unsent.empty() && m_unsent.front().first <= m_sent_total) {
    const uint32_t id = m_unsent.front().second;
    m_unsent.pop_front();
    auto it = m_pending.find(id);
    if (it != m_pending.end() && !it->second.deadline && it->second.wait != k_forever) {
      it->second.deadline = now + m_io_timeout + it->second.wait;
      m_deadlines.emplace(*it->second.deadline, id);
    }
  }
}

void AsyncClient::receive(TimePoint now) {
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
    const Failure kind = m_handshaken ? Failure::k_lost : Failure::k_refused;
    try {
      const auto len = protocol::complete_frame(std::string_view(m_in).substr(offset),
                                                protocol::k_max_reply + protocol::k_frame_tag);
      if (!len) {
        break;
      }
      std::string_view body = std::string_view(m_in).substr(offset + 4, *len);
      if (m_mac_in && !m_mac_in->open(body, body)) {
        fail(Failure::k_lost,
             "a reply failed its authentication check (changed or injected on the way): the "
             "connection is not trusted any more");
        return;
      }
      // HELLO's answer has no id; every later reply has one.
      const Reply reply = protocol::parse_reply(body, m_hello_answered);
      offset += 4 + *len;
      if (reply.status == Status::k_busy && !m_handshaken) {
        retry_busy(protocol::error_message(reply), now);
        return;
      }
      if (reply.status == Status::k_error) {
        fail(m_handshaken ? Failure::k_rejected : Failure::k_refused,
             (m_handshaken ? "refused the request: " : "refused this node: ") +
                 protocol::error_message(reply));
        return;
      }
      dispatch(reply);
    } catch (const protocol::ProtocolError& e) {
      fail(kind, m_handshaken ? std::string("malformed reply: ") + e.what() : not_a_store());
      return;
    }
  }
  if (m_state != State::k_ready) {
    return;
  }
  m_in.erase(0, offset);
  if (closed) {
    if (m_handshaken) {
      fail(Failure::k_lost, "connection closed by the store (its agent exited?)");
    } else if (m_in.empty() && ++m_silent_closes < k_max_silent_closes) {
      // A store whose handshake pool is full closes the oldest: its BUSY may
      // be lost with the reset. A few such closes are tried again.
      retry_busy("the store closed the connection during the handshake", now);
    } else {
      fail(Failure::k_refused, "connection closed before HELLO was answered: " + not_a_store());
    }
  }
}

// No slot is free at the store now: this node tries again, on a new
// connection, with back-off, until its deadline (--rdzv-timeout).
void AsyncClient::retry_busy(const std::string& why, TimePoint now) {
  if (now + m_backoff >= m_connect_deadline) {
    fail(Failure::k_refused, "refused this node until its deadline: " + why);
    return;
  }
  start_over();
  m_retry_at = now + m_backoff;
  m_backoff = std::min(m_backoff * 2, Duration(k_max_backoff));
}

void AsyncClient::start_over() {
  m_fd.close();
  m_in.clear();
  m_out.clear();
  m_pending.clear();
  m_unsent.clear();
  m_deadlines.clear();
  m_sent_total = m_queued_total = 0;
  m_hello_answered = false;
  m_mac_in.reset();
  m_mac_out.reset();
  m_state = State::k_connecting;
  m_in_progress = false;
  m_client_nonce = auth::random_nonce();
  enqueue(0, protocol::request::hello(m_client_nonce), Duration(0),
          [this](const Reply& r) { on_hello(r); });
}

void AsyncClient::reconnect(Duration connect_timeout) {
  const TimePoint now = Clock::now();
  start_over();
  m_held.clear();
  m_handshaken = false;
  m_write_failed = false;
  m_silent_closes = 0;
  m_error = Error{};
  m_connect_deadline = now + connect_timeout;
  m_backoff = Duration(10);
  try_connect(now);
}

// Hands a reply to its request's callback (HELLO's is id 0).
void AsyncClient::dispatch(const Reply& reply) {
  auto it = m_pending.find(m_hello_answered ? reply.id : 0);
  if (it == m_pending.end() || (m_hello_answered && reply.id == 0)) {
    throw protocol::ProtocolError("a reply nobody asked for (id " + std::to_string(reply.id) + ")");
  }
  Callback callback = std::move(it->second.callback);
  if (it->second.deadline) {
    m_deadlines.erase({*it->second.deadline, it->first});
  }
  m_pending.erase(it);
  callback(reply);
}

std::string AsyncClient::not_a_store() const {
  return "the program listening there is not a ddplaunch store (it answered something else); "
         "is another program using port " +
         std::to_string(m_port) + "? choose a free --master-port";
}

void AsyncClient::unreachable() {
  fail(Failure::k_unreachable,
       "cannot reach the store at " + m_where + " (" + std::strerror(m_last_errno) + ")");
}

void AsyncClient::fail(Failure kind, const std::string& why) {
  if (m_state == State::k_failed) {
    return;
  }
  m_state = State::k_failed;
  m_error = Error{kind, kind == Failure::k_unreachable ? why : "store at " + m_where + ": " + why};
  m_fd.close();
  m_pending.clear();
  m_unsent.clear();
  m_deadlines.clear();
  m_held.clear();
  m_out.clear();
  if (m_on_failure) {
    m_on_failure(m_error);
  }
}

uint32_t AsyncClient::next_id() {
  if (m_next_id == 0) {
    m_next_id = 1;  // 0 is HELLO's
  }
  return m_next_id++;
}

void AsyncClient::request(std::string frame, Duration wait, Callback callback) {
  if (m_state == State::k_failed) {
    return;
  }
  if (!m_handshaken) {
    m_held.push_back(Held{std::move(frame), wait, std::move(callback)});
    return;
  }
  enqueue(next_id(), std::move(frame), wait, std::move(callback));
}

void AsyncClient::enqueue(uint32_t id, std::string frame, Duration wait, Callback callback) {
  if (m_state == State::k_failed) {
    return;
  }
  if (id != 0) {
    protocol::set_request_id(frame, id);
  }
  const bool was_empty = m_out.empty();
  const size_t before = m_out.size();
  if (m_mac_out) {
    m_mac_out->seal(frame, m_out);
  } else {
    m_out += frame;
  }
  m_queued_total += m_out.size() - before;
  m_pending.emplace(id, Pending{std::move(callback), wait, std::nullopt});
  m_unsent.emplace_back(m_queued_total, id);
  if (m_state == State::k_ready && was_empty && !m_corked) {
    flush(Clock::now());
  }
}

void AsyncClient::batch(const std::function<void()>& make) {
  const bool outer = !m_corked;
  m_corked = true;
  make();
  if (outer) {
    m_corked = false;
    if (m_state == State::k_ready && !m_out.empty()) {
      flush(Clock::now());
    }
  }
}

}  // namespace ddplaunch
