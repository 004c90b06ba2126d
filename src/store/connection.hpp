// StoreConnection: one connection to a job's store as its users see it.
// Requests go out at once (queued while the connection is made) and their
// replies come back through callbacks, in any order: a parked GET never holds
// back a CAS. A failure is reported once, through the failure handler, with
// its kind; pending callbacks are then dropped. AsyncClient is the real one
// (a socket); the rendezvous unit tests use one over an in-memory KvCore.
// The typed helpers (set, get, ...) are written once here over request().
// Not thread-safe: one thread drives it. Callbacks may issue new requests
// but must not destroy the connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "store/protocol.hpp"

namespace ddplaunch {

class StoreConnection {
 public:
  using Duration = std::chrono::milliseconds;
  // A reply with status OK or TIMEOUT (an ERROR reply is a failure).
  using Callback = std::function<void(const protocol::Reply&)>;
  // For a request that may stay parked on the server as long as it likes.
  static constexpr Duration k_forever = Duration::max();

  enum class Failure {
    k_unreachable,  // no store answered at the address before the connect deadline
    k_refused,      // something answered but the handshake failed: not a store, another
                    // version, the token
    k_lost,         // after the handshake: closed, reset, a reply that failed its check, or
                    // silent past its deadline
    k_rejected,     // after the handshake: the store answered a request with ERROR
  };
  struct Error {
    Failure kind = Failure::k_lost;
    std::string message;  // one line, naming the store's address
  };
  using FailureHandler = std::function<void(const Error&)>;

  virtual ~StoreConnection() = default;
  virtual void set_failure_handler(FailureHandler handler) = 0;
  // Failed for good (the handler has been told).
  virtual bool failed() const = 0;
  // Why it failed (meaningful once failed()).
  virtual const Error& last_error() const = 0;
  // Not yet connected and handshaken: requests are held until then.
  virtual bool connecting() const = 0;
  // Connect attempts made so far (for progress lines).
  virtual int attempts() const = 0;
  // No request waits for its reply.
  virtual bool idle() const = 0;
  // After a failure: starts over on a new connection (connects, handshakes,
  // holds requests meanwhile) within `connect_timeout`, the failure handler
  // kept. Nothing of the old connection is answered.
  virtual void reconnect(Duration connect_timeout) = 0;

  // `frame` is a protocol::request::* frame (the connection stamps its id);
  // `wait` is how long the server may hold it (a GET or WAIT timeout;
  // k_forever for none); the reply is due within that plus the I/O timeout.
  virtual void request(std::string frame, Duration wait, Callback callback) = 0;

  // --- the typed helpers ----------------------------------------------------
  void set(const std::string& key, const std::string& value, std::function<void()> done);
  // nullopt when `timeout` passed first (Duration(0): no limit).
  void get(const std::string& key, Duration timeout,
           std::function<void(std::optional<std::string>)> done);
  void add(const std::string& key, int64_t delta, std::function<void(int64_t)> done);
  // DELETE: `done` once the key is gone (whether it existed or not).
  void erase(const std::string& key, std::function<void()> done);
  // Sets `desired` if the key holds `expected` (nullopt: if absent); hands
  // over the value held afterwards.
  void compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired, std::function<void(std::string)> done);
  // true once every key exists; false when `timeout` passed first (0: no
  // limit). More keys than one request may carry go in several WAITs at once.
  void wait(const std::vector<std::string>& keys, Duration timeout, std::function<void(bool)> done);
  // Any number of keys: one MULTI_GET per k_max_keys_per_request, put together in order.
  void multi_get(const std::vector<std::string>& keys,
                 std::function<void(std::vector<std::optional<std::string>>)> done);
  // KEYS: every key that starts with `prefix`, sorted.
  void keys(const std::string& prefix, std::function<void(std::vector<std::string>)> done);
  // This connection's GETs and WAITs parked on `key` are answered as timed
  // out (nullopt, false), now.
  void unwatch(const std::string& key, std::function<void()> done);
  // When this connection closes, the store sets `key` to `value` if it is
  // absent then (one per connection: a later call replaces it).
  void on_close(const std::string& key, const std::string& value);
};

}  // namespace ddplaunch
