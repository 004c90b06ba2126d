// ClientOnLoop: an AsyncClient's socket on the process's EventLoop, as an
// owner of its own: before each wait it registers the socket the client
// holds now, for the events it wants now (a new socket for each connect
// attempt, which the client closes itself); the loop hands it the socket's
// events and the client's deadlines. The launcher's connection to its job's
// store rides the loop this way. Not thread-safe: the loop's thread owns it.
#pragma once

#include "posix/event_loop.hpp"
#include "store/async_client.hpp"

namespace ddplaunch {

class ClientOnLoop : public posix::EventLoop::Owner {
 public:
  // Both must outlive it.
  ClientOnLoop(posix::EventLoop& loop, AsyncClient& client);
  ~ClientOnLoop() override;
  ClientOnLoop(const ClientOnLoop&) = delete;
  ClientOnLoop& operator=(const ClientOnLoop&) = delete;

  AsyncClient& client() { return m_client; }

  void prepare() override;
  void on_ready(uint64_t tag, uint32_t events) override;
  std::optional<TimePoint> deadline() const override { return m_client.deadline(); }
  void on_time(TimePoint now) override { m_client.on_time(now); }

 private:
  posix::EventLoop& m_loop;
  AsyncClient& m_client;
  uint64_t m_tag;
  int m_fd = -1;      // the socket as the loop holds it
  int m_attempt = 0;  // the client's connect attempt that opened it
};

}  // namespace ddplaunch
