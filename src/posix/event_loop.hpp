// EventLoop: a thin owner of one epoll instance. Callers register fds with a
// 64-bit tag and the events they want; wait() returns the ready tags. It holds
// no callbacks and owns none of the fds: whoever registers an fd removes it
// before closing it. Not thread-safe: one thread owns the loop.
#pragma once

#include <sys/epoll.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "posix/fd.hpp"

namespace ddplaunch::posix {

class EventLoop {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Ready {
    uint64_t tag;
    uint32_t events;  // EPOLLIN, EPOLLOUT, EPOLLHUP, EPOLLERR, EPOLLRDHUP
  };

  EventLoop();

  // Registers `fd`, or changes its events and tag when it is registered already.
  void set(int fd, uint32_t events, uint64_t tag);
  // Forgets `fd` (a no-op for an fd that is not registered).
  void remove(int fd);
  // Forgets `fd` without a system call, for an fd closed already or about
  // to be, whose open file no other fd holds: its close removes it from the
  // epoll (a pipe per worker stream: two calls fewer per worker).
  void forget_closed(int fd) { m_fds.erase(fd); }
  // The same, unless the number was registered since under another tag (a
  // closed fd's number may be anyone's next).
  void forget_closed(int fd, uint64_t tag) {
    if (auto it = m_fds.find(fd); it != m_fds.end() && it->second.tag == tag) {
      m_fds.erase(it);
    }
  }
  bool contains(int fd) const { return m_fds.contains(fd); }
  // The epoll instance: readable while a registered fd is ready, so that
  // another loop can watch this one.
  int fd() const { return m_epoll.get(); }

  // Waits until an fd is ready or `deadline` passes (nullopt: no deadline).
  // EINTR returns an empty list.
  std::vector<Ready> wait(std::optional<TimePoint> deadline);

 private:
  struct Entry {
    uint32_t events;
    uint64_t tag;
  };
  Fd m_epoll;
  std::unordered_map<int, Entry> m_fds;
};

}  // namespace ddplaunch::posix
