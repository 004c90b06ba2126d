#include "posix/event_loop.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <utility>

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

uint64_t EventLoop::attach(Owner& owner) {
  m_slots.emplace(&owner, m_owners.size());
  m_owners.push_back(&owner);
  return static_cast<uint64_t>(m_owners.size()) * k_owner_span;
}

void EventLoop::detach(Owner& owner) {
  // Its slots stay empty, never reused: an event of its still waiting in a
  // batch being handed out finds no owner, not the next one attached.
  const auto [first, last] = m_slots.equal_range(&owner);
  for (auto it = first; it != last; ++it) {
    m_owners[it->second] = nullptr;
  }
  m_slots.erase(first, last);
}

EventLoop::Owner* EventLoop::owner_of(uint64_t tag) const {
  const uint64_t index = tag / k_owner_span;
  return index > 0 && index <= m_owners.size() ? m_owners[index - 1] : nullptr;
}

void EventLoop::turn(std::optional<TimePoint> until,
                     const std::function<void(const Ready&)>& others,
                     const std::function<bool()>& stop) {
  // By index: an owner may attach another while it is called.
  for (size_t i = 0; i < m_owners.size(); ++i) {
    if (m_owners[i] != nullptr) {
      m_owners[i]->prepare();
    }
  }
  for (size_t i = 0; i < m_owners.size(); ++i) {
    if (m_owners[i] != nullptr) {
      if (const auto d = m_owners[i]->deadline(); d && (!until || *d < *until)) {
        until = d;
      }
    }
  }
  for (const Ready& ready : wait(until)) {
    if (stop && stop()) {
      return;
    }
    if (Owner* owner = owner_of(ready.tag)) {
      owner->on_ready(ready.tag, ready.events);
    } else if (others) {
      others(ready);
    }
  }
  if (stop && stop()) {
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < m_owners.size(); ++i) {
    if (m_owners[i] != nullptr) {
      m_owners[i]->on_time(now);
    }
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

Watch::Watch(EventLoop& loop, int fd, std::function<void()> on_readable)
    : m_loop(loop), m_fd(fd), m_on_readable(std::move(on_readable)) {
  m_loop.set(fd, EPOLLIN, m_loop.attach(*this));
}

Watch::~Watch() {
  m_loop.remove(m_fd);
  m_loop.detach(*this);
}

void Watch::on_ready(uint64_t, uint32_t) {
  m_on_readable();
}

}  // namespace ddplaunch::posix
