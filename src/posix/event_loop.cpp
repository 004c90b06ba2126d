#include "posix/event_loop.hpp"

#include <algorithm>
#include <array>
#include <cerrno>

#include "posix/error.hpp"

namespace ddplaunch::posix {

EventLoop::EventLoop() : m_epoll(epoll_create1(EPOLL_CLOEXEC)) {
  if (!m_epoll) {
    throw_errno("epoll_create1");
  }
}

void EventLoop::set(int fd, uint32_t events, uint64_t tag) {
  auto it = m_fds.find(fd);
  if (it != m_fds.end() && it->second.events == events && it->second.tag == tag) {
    return;
  }
  epoll_event ev = {};
  ev.events = events;
  ev.data.u64 = tag;
  const int op = it == m_fds.end() ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  int rc = epoll_ctl(m_epoll.get(), op, fd, &ev);
  if (rc != 0 && op == EPOLL_CTL_MOD && errno == ENOENT) {
    // The fd was closed (which unregisters it) and its number reused.
    rc = epoll_ctl(m_epoll.get(), EPOLL_CTL_ADD, fd, &ev);
  } else if (rc != 0 && op == EPOLL_CTL_ADD && errno == EEXIST) {
    // Forgotten as closed while still open: it is registered still.
    rc = epoll_ctl(m_epoll.get(), EPOLL_CTL_MOD, fd, &ev);
  }
  if (rc != 0) {
    throw_errno("epoll_ctl");
  }
  m_fds[fd] = Entry{events, tag};
}

void EventLoop::remove(int fd) {
  if (m_fds.erase(fd) > 0) {
    epoll_ctl(m_epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
  }
}

std::vector<EventLoop::Ready> EventLoop::wait(std::optional<TimePoint> deadline) {
  int timeout_ms = -1;
  if (deadline) {
    auto ms =
        std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now())
            .count();
    timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
  }
  std::array<epoll_event, 64> events;
  int n = epoll_wait(m_epoll.get(), events.data(), static_cast<int>(events.size()), timeout_ms);
  if (n < 0) {
    if (errno == EINTR) {
      return {};
    }
    throw_errno("epoll_wait");
  }
  std::vector<Ready> ready;
  ready.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ready.push_back(
        {events[static_cast<size_t>(i)].data.u64, events[static_cast<size_t>(i)].events});
  }
  return ready;
}

}  // namespace ddplaunch::posix
