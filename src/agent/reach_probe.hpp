// ReachProbe: the network preflight's connects, made at once and non-blocking
// (rendezvous/preflight.hpp's NetworkProbe). Its sockets sit in an epoll of
// their own, which it registers on the process's loop while connects are in
// flight (an owner of its own there), so the loop goes on (signals, the
// store) while they connect. It also owns this node's probe
// listener, which never accepts: the kernel completes a peer's handshake in
// the listen backlog. Each connect closes with a reset (SO_LINGER 0), so no
// side keeps a TIME_WAIT. Not thread-safe: the agent's thread drives it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "posix/event_loop.hpp"
#include "posix/fd.hpp"
#include "rendezvous/preflight.hpp"

namespace ddplaunch {

class ReachProbe : public NetworkProbe, public posix::EventLoop::Owner {
 public:
  using TimePoint = NetworkProbe::TimePoint;  // the loop's too
  // Driven by hand (fd(), on_ready(), on_time()), or on `loop` (which must
  // outlive it) as an owner of its own.
  ReachProbe() = default;
  explicit ReachProbe(posix::EventLoop& loop);
  ~ReachProbe() override;
  ReachProbe(const ReachProbe&) = delete;
  ReachProbe& operator=(const ReachProbe&) = delete;
  // Opens this node's probe listener on every address (any free port) and
  // returns the port; throws std::system_error when it cannot.
  int listen_on();

  bool hold_port(int port) override;
  void release() override;
  void start(std::vector<ProbeTarget> targets, TimePoint deadline, Done done) override;
  int fd() const override { return m_in_flight == 0 ? -1 : m_loop->fd(); }
  void on_ready(TimePoint now) override;
  std::optional<TimePoint> deadline() const override;
  void on_time(TimePoint now) override;
  // EventLoop::Owner: its epoll watched only while connects are in flight.
  void prepare() override;
  void on_ready(uint64_t tag, uint32_t events) override;

 private:
  struct Connect {
    ProbeTarget target;
    posix::Fd fd;
  };
  void end(size_t i, const std::string& error);  // error empty: it connected
  void finish_if_done();

  // Made by the first start(): a node short of descriptors fails no
  // earlier than its probes would.
  std::optional<posix::EventLoop> m_loop;
  posix::EventLoop* m_outer = nullptr;  // the process's loop, when on one
  uint64_t m_tag = 0;
  int m_watched = -1;    // m_loop's fd as m_outer holds it
  posix::Fd m_listener;  // this node's probe port
  posix::Fd m_held;      // node 0's MASTER_PORT, until release()
  std::vector<Connect> m_connects;
  std::vector<ProbeFailure> m_failures;
  size_t m_in_flight = 0;
  TimePoint m_deadline{};
  double m_timeout_s = 0;
  Done m_done;
};

}  // namespace ddplaunch
