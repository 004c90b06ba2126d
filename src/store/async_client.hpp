// AsyncClient: one non-blocking connection to a StoreServer, driven by the
// caller's event loop. It never blocks: it connects (retrying with back-off
// until the connect deadline), says HELLO, and pipelines requests whose
// replies arrive in order and are handed to callbacks. The owner watches
// fd() for events(), calls on_ready() and on_time(), and is told of a failure
// (unreachable store, closed connection, no reply within the I/O timeout, a
// refused request) once, through the failure handler; pending callbacks are
// then dropped. Not thread-safe: one thread drives it. Callbacks may issue new
// requests but must not destroy the client.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "posix/fd.hpp"
#include "store/protocol.hpp"

namespace ddplaunch {

class AsyncClient {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  using Duration = std::chrono::milliseconds;
  // A reply with status OK or TIMEOUT (an ERROR reply is a failure).
  using Callback = std::function<void(const protocol::Reply&)>;
  using FailureHandler = std::function<void(const std::string& why)>;
  // For a request that may stay parked on the server as long as it likes.
  static constexpr Duration k_forever = Duration::max();

  enum class State { k_connecting, k_ready, k_failed };

  // Starts connecting at once. `connect_timeout` bounds the whole connecting
  // phase (every attempt); `io_timeout` bounds each reply beyond the time the
  // request itself may wait on the server. `token`: the job's secret (empty:
  // none); with one, the store must prove it knows it and so must we
  // (store/auth.hpp); requests wait until the handshake is done.
  AsyncClient(std::string host, int port, Duration connect_timeout, Duration io_timeout,
              TimePoint now = Clock::now(), std::string token = {});
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  void set_failure_handler(FailureHandler handler) { m_on_failure = std::move(handler); }

  // --- driving it -------------------------------------------------------------
  // The socket, or -1 between connect attempts and after a failure.
  int fd() const { return m_fd.get(); }
  // EPOLLIN, plus EPOLLOUT while connecting or while requests wait to be sent.
  uint32_t events() const;
  // When on_time() must be called next: a retry, or a reply that is due.
  std::optional<TimePoint> deadline() const;
  void on_ready(uint32_t events, TimePoint now);
  void on_time(TimePoint now);

  State state() const { return m_state; }
  // True once the store answered HELLO (and AUTH was sent): requests flow.
  bool handshaken() const { return m_handshaken; }
  int attempts() const { return m_attempts; }
  const std::string& where() const { return m_where; }
  const std::string& error() const { return m_error; }
  // True when no request is waiting for its reply.
  bool idle() const { return m_pending.empty(); }

  // --- requests (queued while connecting; ignored after a failure) -----------
  // `frame` is a protocol::request::* frame; `wait` is how long the server
  // may hold it (a GET or WAIT timeout; k_forever for none).
  void request(std::string frame, Duration wait, Callback callback);

  void set(const std::string& key, const std::string& value, std::function<void()> done);
  // nullopt when `timeout` passed first (Duration(0): no limit).
  void get(const std::string& key, Duration timeout,
           std::function<void(std::optional<std::string>)> done);
  void add(const std::string& key, int64_t delta, std::function<void(int64_t)> done);
  // Sets `desired` if the key holds `expected` (nullopt: if absent); hands
  // over the value held afterwards.
  void compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired, std::function<void(std::string)> done);
  // true once every key exists; false when `timeout` passed first (0: no limit).
  void wait(const std::vector<std::string>& keys, Duration timeout, std::function<void(bool)> done);
  void multi_get(const std::vector<std::string>& keys,
                 std::function<void(std::vector<std::optional<std::string>>)> done);

 private:
  struct Pending {
    Callback callback;
    Duration wait;
    std::optional<TimePoint> deadline;  // set once the request is fully sent
    size_t end_offset;                  // where its bytes end in the send stream
  };
  void try_connect(TimePoint now);
  void connected(TimePoint now);
  void flush(TimePoint now);
  void receive();
  void fail(const std::string& why);
  void on_hello(const protocol::Reply& reply);
  std::string not_a_store() const;
  void enqueue(std::string frame, Duration wait, Callback callback);

  std::string m_host;
  int m_port;
  std::string m_where;
  Duration m_io_timeout;
  TimePoint m_connect_deadline;
  State m_state = State::k_connecting;
  posix::Fd m_fd;
  bool m_in_progress = false;           // a connect() is under way on m_fd
  TimePoint m_attempt_deadline{};       // when the connect under way is given up
  std::optional<TimePoint> m_retry_at;  // when the next connect attempt starts
  Duration m_backoff{10};
  int m_attempts = 0;
  int m_last_errno = 0;
  std::string m_out;        // bytes not yet sent
  size_t m_sent_total = 0;  // bytes sent since the connection was made
  size_t m_queued_total = 0;
  std::string m_in;
  std::deque<Pending> m_pending;
  std::string m_error;
  FailureHandler m_on_failure;
  std::string m_token;
  std::string m_client_nonce;
  bool m_handshaken = false;  // HELLO answered (and AUTH sent): requests may flow
  struct Held {
    std::string frame;
    Duration wait;
    Callback callback;
  };
  std::vector<Held> m_held;  // requests made before the handshake
};

}  // namespace ddplaunch
