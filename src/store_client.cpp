#include "ddplaunch/store_client.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <thread>

#include "ddplaunch/protocol.hpp"
#include "posix/fd.hpp"
#include "posix/net.hpp"

namespace ddplaunch {

namespace {
using Clock = std::chrono::steady_clock;
using protocol::Op;
using protocol::Status;
}  // namespace

struct StoreClient::Impl {
  posix::Fd fd;
  std::string where;
  Duration io_timeout{};
  std::string in;

  void send(const std::string& frame, Clock::time_point deadline);
  std::string receive(Clock::time_point deadline);
  // Sends a request and returns the reply body after its OK status; nullopt on TIMEOUT.
  std::optional<std::string> call(protocol::Encoder& request, Duration op_timeout);
  [[noreturn]] void fail(const std::string& what);
};

void StoreClient::Impl::fail(const std::string& what) {
  fd.close();
  throw StoreError("store at " + where + ": " + what);
}

void StoreClient::Impl::send(const std::string& frame, Clock::time_point deadline) {
  if (!fd) {
    fail("connection is closed");
  }
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t n = ::send(fd.get(), frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail(std::string("send failed: ") + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
    if (Clock::now() > deadline) {
      fail("timed out sending");
    }
  }
}

std::string StoreClient::Impl::receive(Clock::time_point deadline) {
  while (true) {
    std::optional<size_t> len;
    try {
      len = protocol::complete_frame(in);
    } catch (const protocol::ProtocolError& e) {
      fail(e.what());
    }
    if (len) {
      std::string body = in.substr(4, *len);
      in.erase(0, 4 + *len);
      return body;
    }
    auto left = std::chrono::ceil<Duration>(deadline - Clock::now()).count();
    if (left <= 0) {
      fail("no answer within " + std::to_string(io_timeout.count()) +
           " ms (the store host may be stopped or unreachable)");
    }
    pollfd p = {fd.get(), POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<long long>(left, 60'000)));
    if (rc < 0 && errno != EINTR) {
      fail(std::string("poll failed: ") + std::strerror(errno));
    }
    if (rc <= 0) {
      continue;
    }
    char buf[64 * 1024];
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) {
      fail("connection closed by the store (its agent exited?)");
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      fail(std::string("receive failed: ") + std::strerror(errno));
    }
    in.append(buf, static_cast<size_t>(n));
  }
}

std::optional<std::string> StoreClient::Impl::call(protocol::Encoder& request,
                                                   Duration op_timeout) {
  const auto deadline = Clock::now() + op_timeout + io_timeout;
  send(request.finish(), deadline);
  std::string body = receive(deadline);
  protocol::Decoder d(body);
  try {
    auto status = static_cast<Status>(d.u8());
    if (status == Status::k_timeout) {
      return std::nullopt;
    }
    if (status == Status::k_error) {
      fail("refused the request: " + d.bytes(protocol::k_max_frame));
    }
  } catch (const protocol::ProtocolError& e) {
    fail(std::string("malformed reply: ") + e.what());
  }
  return body.substr(1);
}

StoreClient::StoreClient(const std::string& host, int port, Duration connect_timeout,
                         Duration io_timeout)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->where = host + ":" + std::to_string(port);
  m_impl->io_timeout = io_timeout;
  const auto deadline = Clock::now() + connect_timeout;
  Duration backoff(10);
  int last_errno = 0;
  while (true) {
    auto left = std::chrono::ceil<Duration>(deadline - Clock::now());
    auto fd = posix::try_connect_tcp(host, port, std::clamp(left, Duration(1), Duration(5000)));
    if (fd) {
      m_impl->fd = std::move(*fd);
      break;
    }
    last_errno = errno;
    if (Clock::now() + backoff >= deadline) {
      throw StoreError("cannot reach the store at " + m_impl->where + " (" +
                       std::strerror(last_errno) + ")");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, Duration(1000));
  }
  protocol::Encoder hello;
  hello.u8(static_cast<uint8_t>(Op::k_hello)).u32(protocol::k_magic).u16(protocol::k_version);
  m_impl->call(hello, Duration(0));
}

StoreClient::~StoreClient() = default;
StoreClient::StoreClient(StoreClient&&) noexcept = default;
StoreClient& StoreClient::operator=(StoreClient&&) noexcept = default;

namespace {
protocol::Encoder request(Op op) {
  protocol::Encoder e;
  e.u8(static_cast<uint8_t>(op));
  return e;
}
uint32_t to_ms(StoreClient::Duration d) {
  return static_cast<uint32_t>(std::clamp<long long>(d.count(), 0, UINT32_MAX));
}
protocol::Encoder& put_keys(protocol::Encoder& e, const std::vector<std::string>& keys) {
  e.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    e.bytes(k);
  }
  return e;
}
}  // namespace

void StoreClient::set(const std::string& key, const std::string& value) {
  auto e = request(Op::k_set);
  e.bytes(key).bytes(value);
  m_impl->call(e, Duration(0));
}

std::optional<std::string> StoreClient::get(const std::string& key, Duration timeout) {
  auto e = request(Op::k_get);
  e.bytes(key).u32(to_ms(timeout));
  auto reply = m_impl->call(e, timeout.count() == 0 ? Duration(24L * 3600 * 1000) : timeout);
  if (!reply) {
    return std::nullopt;
  }
  return protocol::Decoder(*reply).bytes(protocol::k_max_value);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  auto e = request(Op::k_add);
  e.bytes(key).i64(delta);
  const std::string body = *m_impl->call(e, Duration(0));
  return protocol::Decoder(body).i64();
}

std::string StoreClient::compare_set(const std::string& key,
                                     const std::optional<std::string>& expected,
                                     const std::string& desired) {
  auto e = request(Op::k_cas);
  e.bytes(key).u8(expected ? 0 : 1).bytes(expected.value_or("")).bytes(desired);
  const std::string body = *m_impl->call(e, Duration(0));  // the Decoder views it
  protocol::Decoder d(body);
  d.u8();
  return d.bytes(protocol::k_max_value);
}

bool StoreClient::remove(const std::string& key) {
  auto e = request(Op::k_delete);
  e.bytes(key);
  const std::string body = *m_impl->call(e, Duration(0));
  return protocol::Decoder(body).u8() != 0;
}

bool StoreClient::wait(const std::vector<std::string>& keys, Duration timeout) {
  auto e = request(Op::k_wait);
  put_keys(e, keys).u32(to_ms(timeout));
  return m_impl->call(e, timeout.count() == 0 ? Duration(24L * 3600 * 1000) : timeout)
      .has_value();
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  auto e = request(Op::k_check);
  put_keys(e, keys);
  const std::string body = *m_impl->call(e, Duration(0));
  return protocol::Decoder(body).u8() != 0;
}

uint64_t StoreClient::num_keys() {
  auto e = request(Op::k_num_keys);
  const std::string body = *m_impl->call(e, Duration(0));
  return protocol::Decoder(body).u64();
}

std::vector<std::optional<std::string>> StoreClient::multi_get(
    const std::vector<std::string>& keys) {
  auto e = request(Op::k_multi_get);
  put_keys(e, keys);
  auto body = *m_impl->call(e, Duration(0));
  protocol::Decoder d(body);
  std::vector<std::optional<std::string>> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    bool present = d.u8() != 0;
    auto v = d.bytes(protocol::k_max_value);
    out.push_back(present ? std::optional(std::move(v)) : std::nullopt);
  }
  return out;
}

void StoreClient::ping() {
  auto e = request(Op::k_ping);
  m_impl->call(e, Duration(0));
}

void StoreClient::send_get(const std::string& key) {
  auto e = request(Op::k_get);
  e.bytes(key).u32(0);
  m_impl->send(e.finish(), Clock::now() + m_impl->io_timeout);
}

std::string StoreClient::read_get() {
  // The answer may take forever by design; the caller polled fd() first.
  std::string body = m_impl->receive(Clock::now() + std::chrono::hours(24 * 365));
  protocol::Decoder d(body);
  auto status = static_cast<Status>(d.u8());
  if (status != Status::k_ok) {
    m_impl->fail("refused the request: " +
                 (status == Status::k_error ? d.bytes(protocol::k_max_frame) : "timeout"));
  }
  return d.bytes(protocol::k_max_value);
}

int StoreClient::fd() const { return m_impl->fd.get(); }

}  // namespace ddplaunch
