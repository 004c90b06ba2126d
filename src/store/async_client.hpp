// AsyncClient: the real StoreConnection, one non-blocking socket to a
// StoreServer driven by the caller's event loop. It never blocks on the
// network: it connects (retrying with back-off until the connect deadline),
// says HELLO, and sends each request with an id; replies are matched by id,
// in whatever order they come. The owner watches fd() for events(), calls
// on_ready() and on_time(). Each connect attempt resolves the host name with
// getaddrinfo() (posix::start_connect), which waits on the resolver; give an
// address to avoid it. Not thread-safe: one thread drives it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "posix/fd.hpp"
#include "store/auth.hpp"
#include "store/connection.hpp"

namespace ddplaunch {

class AsyncClient : public StoreConnection {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

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

  void set_failure_handler(FailureHandler handler) override { m_on_failure = std::move(handler); }
  bool failed() const override { return m_state == State::k_failed; }
  const Error& last_error() const override { return m_error; }
  bool connecting() const override { return !m_handshaken; }
  int attempts() const override { return m_attempts; }
  // True when no request is waiting for its reply.
  bool idle() const override { return m_pending.empty() && m_held.empty(); }
  void request(std::string frame, Duration wait, Callback callback) override;
  void reconnect(Duration connect_timeout) override;
  // The requests `make` makes are sent together once it returns, in as few
  // writes as the socket takes (16,384 removals: a few, not 16,384).
  void batch(const std::function<void()>& make);

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
  const std::string& where() const { return m_where; }
  const std::string& error() const { return m_error.message; }
  Failure failure() const { return m_error.kind; }

 private:
  struct Pending {
    Callback callback;
    Duration wait;
    std::optional<TimePoint> deadline;  // set once the request is fully sent
  };
  void try_connect(TimePoint now);
  void connected(TimePoint now);
  void flush(TimePoint now);
  void receive(TimePoint now);
  void retry_busy(const std::string& why, TimePoint now);
  // Forgets the connection and its requests; HELLO waits for the next one.
  void start_over();
  void on_auth();
  void fail(Failure kind, const std::string& why);
  void unreachable();  // the connect deadline passed
  uint32_t next_id();
  void on_hello(const protocol::Reply& reply);
  void dispatch(const protocol::Reply& reply);
  std::string not_a_store() const;
  // `id` 0: HELLO (sent first, its frame carries none).
  void enqueue(uint32_t id, std::string frame, Duration wait, Callback callback);

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
  std::map<uint32_t, Pending> m_pending;  // by request id
  // Requests not yet wholly sent, in the order they were queued: (where
  // their bytes end, id). A send moves those it finished to m_deadlines.
  std::deque<std::pair<size_t, uint32_t>> m_unsent;
  std::set<std::pair<TimePoint, uint32_t>> m_deadlines;  // of requests sent
  uint32_t m_next_id = 1;
  Error m_error;
  FailureHandler m_on_failure;
  std::string m_token;
  std::string m_client_nonce;
  std::string m_server_nonce;
  bool m_hello_answered = false;  // replies carry ids from here on
  int m_silent_closes = 0;        // connections closed in the handshake without a word
  bool m_handshaken = false;      // HELLO (and AUTH) answered: requests may flow
  bool m_corked = false;          // inside batch(): requests wait to be sent together
  bool m_write_failed = false;    // the store closed: its last replies are read, then the end
  // The authenticated session after AUTH: every frame sealed, both ways.
  std::optional<auth::FrameMac> m_mac_in;
  std::optional<auth::FrameMac> m_mac_out;
  struct Held {
    std::string frame;
    Duration wait;
    Callback callback;
  };
  std::vector<Held> m_held;  // requests made before the handshake
};

}  // namespace ddplaunch
