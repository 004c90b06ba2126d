#include "store/connection.hpp"

#include <algorithm>
#include <climits>
#include <memory>

namespace ddplaunch {

namespace {

using protocol::Reply;
using protocol::Status;

uint32_t to_ms(StoreConnection::Duration d) {
  return static_cast<uint32_t>(std::clamp<long long>(d.count(), 0, UINT32_MAX));
}

StoreConnection::Duration parked_for(StoreConnection::Duration timeout) {
  return timeout.count() == 0 ? StoreConnection::k_forever : timeout;
}

// Splits `keys` into requests of at most k_max_keys_per_request (one, even when empty).
std::vector<std::vector<std::string>> chunks(const std::vector<std::string>& keys) {
  const size_t chunk = protocol::k_max_keys_per_request;
  std::vector<std::vector<std::string>> out;
  for (size_t begin = 0; begin < keys.size() || out.empty(); begin += chunk) {
    const size_t end = std::min(keys.size(), begin + chunk);
    out.emplace_back(keys.begin() + static_cast<long>(begin),
                     keys.begin() + static_cast<long>(end));
  }
  return out;
}

}  // namespace

void StoreConnection::set(const std::string& key, const std::string& value,
                          std::function<void()> done) {
  request(protocol::request::set(key, value), Duration(0),
          [done = std::move(done)](const Reply&) { done(); });
}

void StoreConnection::get(const std::string& key, Duration timeout,
                          std::function<void(std::optional<std::string>)> done) {
  request(protocol::request::get(key, to_ms(timeout)), parked_for(timeout),
          [done = std::move(done)](const Reply& r) {
            done(r.status == Status::k_ok ? std::optional(protocol::read_value(r)) : std::nullopt);
          });
}

void StoreConnection::add(const std::string& key, int64_t delta,
                          std::function<void(int64_t)> done) {
  request(protocol::request::add(key, delta), Duration(0),
          [done = std::move(done)](const Reply& r) { done(protocol::read_i64(r)); });
}

void StoreConnection::erase(const std::string& key, std::function<void()> done) {
  request(protocol::request::remove(key), Duration(0),
          [done = std::move(done)](const Reply&) { done(); });
}

void StoreConnection::compare_set(const std::string& key,
                                  const std::optional<std::string>& expected,
                                  const std::string& desired,
                                  std::function<void(std::string)> done) {
  request(protocol::request::compare_set(key, expected, desired), Duration(0),
          [done = std::move(done)](const Reply& r) { done(protocol::read_cas_current(r)); });
}

void StoreConnection::wait(const std::vector<std::string>& keys, Duration timeout,
                           std::function<void(bool)> done) {
  auto parts = chunks(keys);
  // Every part's answer is awaited: the result is known once the last comes.
  struct Gather {
    size_t left;
    bool all = true;
    std::function<void(bool)> done;
  };
  auto gather = std::make_shared<Gather>(Gather{parts.size(), true, std::move(done)});
  for (auto& part : parts) {
    request(protocol::request::wait(part, to_ms(timeout)), parked_for(timeout),
            [gather](const Reply& r) {
              gather->all = gather->all && r.status == Status::k_ok;
              if (--gather->left == 0) {
                gather->done(gather->all);
              }
            });
  }
}

void StoreConnection::multi_get(const std::vector<std::string>& keys,
                                std::function<void(std::vector<std::optional<std::string>>)> done) {
  auto parts = chunks(keys);
  struct Gather {
    std::vector<std::optional<std::string>> values;
    size_t left;
    std::function<void(std::vector<std::optional<std::string>>)> done;
  };
  auto gather = std::make_shared<Gather>(
      Gather{std::vector<std::optional<std::string>>(keys.size()), parts.size(), std::move(done)});
  size_t begin = 0;
  for (auto& part : parts) {
    const size_t count = part.size();
    request(protocol::request::multi_get(part), Duration(0),
            [gather, begin, count](const Reply& r) {
              auto values = protocol::read_multi(r, count);
              std::move(values.begin(), values.end(),
                        gather->values.begin() + static_cast<long>(begin));
              if (--gather->left == 0) {
                gather->done(std::move(gather->values));
              }
            });
    begin += count;
  }
}

void StoreConnection::keys(const std::string& prefix,
                           std::function<void(std::vector<std::string>)> done) {
  request(protocol::request::keys(prefix), Duration(0),
          [done = std::move(done)](const Reply& r) { done(protocol::read_keys(r)); });
}

void StoreConnection::unwatch(const std::string& key, std::function<void()> done) {
  request(protocol::request::unwatch(key), Duration(0),
          [done = std::move(done)](const Reply&) { done(); });
}

void StoreConnection::on_close(const std::string& key, const std::string& value) {
  request(protocol::request::on_close(key, value), Duration(0), [](const Reply&) {});
}

}  // namespace ddplaunch
