#include <poll.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

#include "config/integer.hpp"
#include "ddplaunch/store_client.hpp"
#include "store/async_client.hpp"

namespace ddplaunch {

// The blocking client is the asynchronous one driven by its own poll() loop:
// one implementation of connecting, framing and timeouts for both.
struct StoreClient::Impl {
  std::unique_ptr<AsyncClient> conn;
  std::string prefix;  // every key's, from the worker's environment

  std::string key(const std::string& k) const { return prefix + k; }
  std::vector<std::string> keys(const std::vector<std::string>& ks) const {
    std::vector<std::string> out;
    out.reserve(ks.size());
    for (const auto& k : ks) {
      out.push_back(prefix + k);
    }
    return out;
  }

  // Drives the connection until `done` is true; throws StoreError on failure.
  void run_until(const bool& done) {
    while (!done) {
      if (conn->state() == AsyncClient::State::k_failed) {
        if (conn->failure() == StoreConnection::Failure::k_rejected) {
          throw StoreRejected(conn->error());
        }
        throw StoreError(conn->error());
      }
      const auto deadline = conn->deadline();
      int timeout_ms = -1;
      if (deadline) {
        auto ms =
            std::chrono::ceil<std::chrono::milliseconds>(*deadline - AsyncClient::Clock::now())
                .count();
        timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
      }
      pollfd p = {conn->fd(), 0, 0};
      const uint32_t want = conn->events();
      p.events = static_cast<short>(((want & EPOLLIN) != 0 ? POLLIN | POLLRDHUP : 0) |
                                    ((want & EPOLLOUT) != 0 ? POLLOUT : 0));
      const int n = p.fd >= 0 ? poll(&p, 1, timeout_ms) : poll(nullptr, 0, timeout_ms);
      if (n < 0 && errno != EINTR) {
        throw StoreError("store at " + conn->where() + ": poll failed");
      }
      const auto now = AsyncClient::Clock::now();
      if (n > 0) {
        uint32_t ev = 0;
        ev |= (p.revents & POLLIN) != 0 ? EPOLLIN : 0u;
        ev |= (p.revents & POLLOUT) != 0 ? EPOLLOUT : 0u;
        ev |= (p.revents & POLLRDHUP) != 0 ? EPOLLRDHUP : 0u;
        ev |= (p.revents & POLLHUP) != 0 ? EPOLLHUP : 0u;
        ev |= (p.revents & POLLERR) != 0 ? EPOLLERR : 0u;
        conn->on_ready(ev, now);
      }
      conn->on_time(now);
    }
  }

  // Issues one request through `issue` and waits for its result.
  template <typename T, typename Issue>
  T call(Issue&& issue) {
    std::optional<T> result;
    bool done = false;
    issue([&](T value) {
      result = std::move(value);
      done = true;
    });
    run_until(done);
    return std::move(*result);
  }
};

StoreClient::StoreClient(const std::string& host, int port, Duration connect_timeout,
                         Duration io_timeout, const std::string& token)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->conn = std::make_unique<AsyncClient>(host, port, connect_timeout, io_timeout,
                                               AsyncClient::Clock::now(), token);
  bool done = false;
  // HELLO is the first request; a PING behind it is answered once HELLO is.
  m_impl->conn->request(protocol::request::ping(), Duration(0),
                        [&done](const protocol::Reply&) { done = true; });
  m_impl->run_until(done);
}

StoreClient::~StoreClient() = default;
StoreClient::StoreClient(StoreClient&&) noexcept = default;
StoreClient& StoreClient::operator=(StoreClient&&) noexcept = default;

void StoreClient::set(const std::string& key, const std::string& value) {
  m_impl->call<bool>(
      [&](auto done) { m_impl->conn->set(m_impl->key(key), value, [done] { done(true); }); });
}

std::optional<std::string> StoreClient::get(const std::string& key, Duration timeout) {
  return m_impl->call<std::optional<std::string>>(
      [&](auto done) { m_impl->conn->get(m_impl->key(key), timeout, done); });
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  return m_impl->call<int64_t>(
      [&](auto done) { m_impl->conn->add(m_impl->key(key), delta, done); });
}

std::string StoreClient::compare_set(const std::string& key,
                                     const std::optional<std::string>& expected,
                                     const std::string& desired) {
  return m_impl->call<std::string>(
      [&](auto done) { m_impl->conn->compare_set(m_impl->key(key), expected, desired, done); });
}

bool StoreClient::remove(const std::string& key) {
  return m_impl->call<bool>([&](auto done) {
    m_impl->conn->request(protocol::request::remove(m_impl->key(key)), Duration(0),
                          [done](const protocol::Reply& r) { done(protocol::read_flag(r)); });
  });
}

size_t StoreClient::remove(const std::vector<std::string>& keys) {
  size_t answered = 0;
  size_t existed = 0;
  bool done = keys.empty();
  m_impl->conn->batch([&] {
    for (const auto& key : keys) {
      m_impl->conn->request(protocol::request::remove(m_impl->key(key)), Duration(0),
                            [&answered, &existed, &done, &keys](const protocol::Reply& r) {
                              existed += protocol::read_flag(r) ? 1 : 0;
                              done = ++answered == keys.size();
                            });
    }
  });
  m_impl->run_until(done);
  return existed;
}

bool StoreClient::wait(const std::vector<std::string>& keys, Duration timeout) {
  return m_impl->call<bool>(
      [&](auto done) { m_impl->conn->wait(m_impl->keys(keys), timeout, done); });
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  return m_impl->call<bool>([&](auto done) {
    m_impl->conn->request(protocol::request::check(m_impl->keys(keys)), Duration(0),
                          [done](const protocol::Reply& r) { done(protocol::read_flag(r)); });
  });
}

uint64_t StoreClient::num_keys() {
  if (!m_impl->prefix.empty()) {
    return keys().size();
  }
  return m_impl->call<uint64_t>([&](auto done) {
    m_impl->conn->request(protocol::request::num_keys(), Duration(0),
                          [done](const protocol::Reply& r) { done(protocol::read_u64(r)); });
  });
}

std::vector<std::optional<std::string>> StoreClient::multi_get(
    const std::vector<std::string>& keys) {
  return m_impl->call<std::vector<std::optional<std::string>>>(
      [&](auto done) { m_impl->conn->multi_get(m_impl->keys(keys), done); });
}

void StoreClient::ping() {
  m_impl->call<bool>([&](auto done) {
    m_impl->conn->request(protocol::request::ping(), Duration(0),
                          [done](const protocol::Reply&) { done(true); });
  });
}

void StoreClient::on_close(const std::string& key, const std::string& value) {
  m_impl->call<bool>([&](auto done) {
    m_impl->conn->request(protocol::request::on_close(key.empty() ? key : m_impl->key(key), value),
                          Duration(0), [done](const protocol::Reply&) { done(true); });
  });
}

std::vector<std::string> StoreClient::keys() {
  auto all = m_impl->call<std::vector<std::string>>([&](auto done) {
    m_impl->conn->request(protocol::request::keys(m_impl->prefix), Duration(0),
                          [done](const protocol::Reply& r) { done(protocol::read_keys(r)); });
  });
  for (auto& k : all) {
    k.erase(0, m_impl->prefix.size());
  }
  return all;
}

const std::string& StoreClient::prefix() const {
  return m_impl->prefix;
}

void StoreClient::set_prefix(const std::string& prefix) {
  m_impl->prefix = prefix;
}

StoreClient StoreClient::from_environment(Duration connect_timeout) {
  auto var = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  const std::string addr = var("DDPLAUNCH_STORE_ADDR");
  const std::string port_text = var("DDPLAUNCH_STORE_PORT");
  if (addr.empty() || port_text.empty()) {
    throw StoreError(
        "DDPLAUNCH_STORE_ADDR and DDPLAUNCH_STORE_PORT are not set: run this program as a worker "
        "of ddplaunch, or name the store yourself");
  }
  const auto port = parse_integer_in(port_text, 1, 65535);
  if (!port) {
    throw StoreError("DDPLAUNCH_STORE_PORT=" + port_text + " is not a port");
  }
  StoreClient client(addr, static_cast<int>(*port), connect_timeout, std::chrono::seconds(30),
                     var("DDPLAUNCH_STORE_TOKEN"));
  client.m_impl->prefix = var("DDPLAUNCH_STORE_PREFIX");
  return client;
}

}  // namespace ddplaunch
