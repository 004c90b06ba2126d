// EventLoop: the one epoll instance of a process's loop, and who is told
// what. Callers register fds with a 64-bit tag and the events they want. An
// Owner attach()es itself and gets a range of tags of its own: turn() then
// hands each ready fd to the owner of its tag, and asks every owner when it
// next needs the time (its deadline) and tells it once that has passed, so
// each thing with fds or timers on the loop (a pipe pump, a store
// connection, an HTTP server, a probe) registers itself, and nothing passes
// its events through a middle man. wait() is the bare form: the ready tags,
// dispatched by the caller. The loop owns none of the fds: whoever
// registers an fd removes it before closing it. Not thread-safe: one thread
// owns the loop.
#pragma once

#include <sys/epoll.h>

#include <chrono>
#include <cstdint>
#include <functional>
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

  // Something with fds or deadlines on the loop.
  class Owner {
   public:
    using TimePoint = EventLoop::TimePoint;
    virtual ~Owner() = default;
    // Before each wait of turn(): its fds brought up to date (a connection's
    // new socket, the events it wants now).
    virtual void prepare() {}
    // One of its fds is ready: `tag` as it registered it (its base included).
    virtual void on_ready(uint64_t tag, uint32_t events) {
      (void)tag;
      (void)events;
    }
    // When it next needs on_time() (nullopt: not before an event).
    virtual std::optional<TimePoint> deadline() const { return std::nullopt; }
    // After each wait of turn(), whatever woke it: it acts on what is due.
    virtual void on_time(TimePoint now) { (void)now; }
  };
  // The tags an owner may use: its base | any value below k_owner_span.
  static constexpr uint64_t k_owner_span = 1ULL << 48;

  EventLoop();

  // Attaches `owner` (which must outlive its attachment): its tag base,
  // above every tag a caller of set() picks by hand (those stay below
  // k_owner_span). Owners are prepared and timed in the order attached.
  uint64_t attach(Owner& owner);
  // Detaches `owner`; its fds must be removed (or closed) first. Its tags
  // are never given to another owner.
  void detach(Owner& owner);
  // The owner of `tag`, if an attached one has it.
  Owner* owner_of(uint64_t tag) const;
  // One turn of the loop: every owner's prepare(), a wait until an fd is
  // ready or the first deadline (the owners', and `until`), each ready fd to
  // its owner (a tag no owner has goes to `others`, if given) until `stop()`
  // says so, then every owner's on_time().
  void turn(std::optional<TimePoint> until, const std::function<void(const Ready&)>& others = {},
            const std::function<bool()>& stop = {});

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
  std::vector<Owner*> m_owners;  // by (tag / k_owner_span) - 1; null: detached
  // Where each attached owner's slots are: a detach is a lookup, not a pass
  // over every owner ever attached (16,383 simulated nodes reconnecting).
  std::unordered_multimap<const Owner*, size_t> m_slots;
};

// An owner of no fd: `Timed`'s deadline() and on_time(now) on the loop (a
// StoreLink's heartbeats and deadlines). Attached while it lives.
template <class Timed>
class TimedOwner : public EventLoop::Owner {
 public:
  TimedOwner(EventLoop& loop, Timed& timed) : m_loop(loop), m_timed(timed) { loop.attach(*this); }
  ~TimedOwner() override { m_loop.detach(*this); }
  TimedOwner(const TimedOwner&) = delete;
  TimedOwner& operator=(const TimedOwner&) = delete;
  std::optional<TimePoint> deadline() const override { return m_timed.deadline(); }
  void on_time(TimePoint now) override { m_timed.on_time(now); }

 private:
  EventLoop& m_loop;
  Timed& m_timed;
};

// An owner of one fd, open for the Watch's life: `on_readable` whenever it
// is readable (a queue's eventfd, a relay's epoll). Attached while it lives.
class Watch : public EventLoop::Owner {
 public:
  Watch(EventLoop& loop, int fd, std::function<void()> on_readable);
  ~Watch() override;
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  void on_ready(uint64_t tag, uint32_t events) override;

 private:
  EventLoop& m_loop;
  int m_fd;
  std::function<void()> m_on_readable;
};

}  // namespace ddplaunch::posix
