// StoreClient: one blocking connection to a ddplaunch store (the job's
// key-value store that node 0's agent hosts), for programs and scripts of the
// job. Every exchange has a deadline, so a store that stops answering is an
// error, not a hang. The launcher itself uses the non-blocking AsyncClient
// (src/store/async_client.hpp), which this class drives with its own poll().
// Not thread-safe: one thread per client (open several for concurrency).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddplaunch {

// The store could not be reached, stopped answering, or refused a request.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The store answered a request with an error and closed the connection: a
// request this client's credential may not make (the workers' credential is
// scoped), or one over the store's limits. The message says which.
class StoreRejected : public StoreError {
 public:
  using StoreError::StoreError;
};

class StoreClient {
 public:
  using Duration = std::chrono::milliseconds;

  // Connects to host:port, retrying with back-off (10 ms doubling to 1 s)
  // until `connect_timeout` passes, then says HELLO (and proves it knows
  // `token`, the job's secret, when the store has one). Throws StoreError.
  // `io_timeout` bounds every later exchange (on top of a call's own timeout).
  StoreClient(const std::string& host, int port, Duration connect_timeout,
              Duration io_timeout = std::chrono::seconds(30), const std::string& token = {});
  // The store of the job this process runs in, as ddplaunch tells each
  // worker: DDPLAUNCH_STORE_ADDR, DDPLAUNCH_STORE_PORT and DDPLAUNCH_STORE_TOKEN
  // (the job's credential, if it has one). Its keys live under
  // DDPLAUNCH_STORE_PREFIX, apart from the launcher's own: "x" here is
  // "user/x" in the store. Throws StoreError when they are not set (the
  // program was not started by ddplaunch) or the store cannot be reached.
  static StoreClient from_environment(Duration connect_timeout = std::chrono::seconds(30));
  ~StoreClient();
  StoreClient(StoreClient&&) noexcept;
  StoreClient& operator=(StoreClient&&) noexcept;

  void set(const std::string& key, const std::string& value);
  // The value once the key exists; nullopt when `timeout` passes first (0 = no limit).
  std::optional<std::string> get(const std::string& key, Duration timeout = Duration(0));
  int64_t add(const std::string& key, int64_t delta);
  // Sets `desired` if the key holds `expected` (nullopt: if the key is absent).
  // Returns the value the key holds afterwards.
  std::string compare_set(const std::string& key, const std::optional<std::string>& expected,
                          const std::string& desired);
  bool remove(const std::string& key);
  // Removes every key, the requests sent at once rather than each after the
  // last one's answer; returns how many existed.
  size_t remove(const std::vector<std::string>& keys);
  // True once every key exists; false when `timeout` passes first (0 = no limit).
  bool wait(const std::vector<std::string>& keys, Duration timeout = Duration(0));
  bool check(const std::vector<std::string>& keys);
  uint64_t num_keys();
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys);
  void ping();
  // When this connection closes (this process exits or is killed), the store
  // sets `key` to `value` if the key is absent then. One per connection; an
  // empty key takes it back.
  void on_close(const std::string& key, const std::string& value);
  // The keys under this client's prefix (without it), sorted.
  std::vector<std::string> keys();
  // What every key is prefixed with: "" unless from_environment() or
  // set_prefix() gave one.
  const std::string& prefix() const;
  void set_prefix(const std::string& prefix);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace ddplaunch
