#include "output/stream_readers.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace ddplaunch {

namespace {

// One read: a flooding worker's whole pipe (the loop enlarges it to this).
constexpr size_t k_read_size = StreamReaders::k_pipe_bytes;
// How often a thread looks again at streams it stopped reading for the console.
constexpr int k_parked_poll_ms = 10;
// One thread per flooding stream up to this many, whatever the CPUs (two
// or more): the scheduler then runs each thread beside the worker filling
// its pipe, as it does `cat` in a shell pipeline. Measured on 2 CPUs with 4
// flooding workers: 4 threads 0.09 s, median and steady, 2 threads 0.13 s
// with runs from 0.08 to 0.19 s (a thread reading two pipes whose writers
// run on different CPUs spins on the pipes' locks).
constexpr int k_most_threads = 4;

void signal_eventfd(int fd) {
  const uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));
}

}  // namespace

struct StreamReaders::Thread {
  posix::Fd epoll;
  posix::Fd wake;  // eventfd: stop() wakes the thread
  std::vector<StreamReaders::Slot*> parked;
  std::thread thread;
};

StreamReaders::StreamReaders(OutputRouter& router, ConsoleSink& console, int threads)
    : m_router(router),
      m_console(console),
      m_max_threads(std::clamp(threads, 0, k_most_threads)),
      m_ended_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!m_ended_fd) {
    throw std::system_error(errno, std::generic_category(), "eventfd");
  }
}

StreamReaders::~StreamReaders() {
  stop();
}

int StreamReaders::threads_for_this_machine() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) {
    return 0;
  }
  return CPU_COUNT(&cpus) < 2 ? 0 : k_most_threads;
}

StreamReaders::Slot* StreamReaders::adopt(uint64_t tag, OutputRouter::StreamRef ref, int fd) {
  if (m_max_threads == 0 || m_stopping.load()) {
    return nullptr;
  }
  posix::Fd copy(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
  if (!copy) {
    return nullptr;
  }
  if (m_next >= m_threads.size()) {
    try {
      auto t = std::make_unique<Thread>();
      t->epoll = posix::Fd(::epoll_create1(EPOLL_CLOEXEC));
      t->wake = posix::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      epoll_event wake{EPOLLIN, {.ptr = nullptr}};
      if (!t->epoll || !t->wake ||
          ::epoll_ctl(t->epoll.get(), EPOLL_CTL_ADD, t->wake.get(), &wake) != 0) {
        return nullptr;
      }
      Thread* raw = t.get();
      t->thread = std::thread([this, raw] { run(*raw); });
      m_threads.push_back(std::move(t));
    } catch (const std::system_error&) {
      return nullptr;  // no thread: the loop reads it
    }
  }
  Thread& t = *m_threads[m_next];
  m_next = (m_next + 1) % static_cast<size_t>(m_max_threads);
  Slot& slot = m_slots.emplace_back();
  {
    std::lock_guard lock(OutputRouter::mutex(ref));
    slot.tag = tag;
    slot.ref = std::move(ref);
    slot.fd = std::move(copy);
    slot.thread = &t;
  }
  epoll_event ev{EPOLLIN, {.ptr = &slot}};
  if (::epoll_ctl(t.epoll.get(), EPOLL_CTL_ADD, slot.fd.get(), &ev) != 0) {
    std::lock_guard lock(OutputRouter::mutex(slot.ref));
    slot.done = true;
    slot.fd.close();
    return nullptr;
  }
  return &slot;
}

int StreamReaders::pump(Slot& slot, char* buffer, size_t size, OutputRouter::Scratch& scratch) {
  if (!OutputRouter::open(slot.ref)) {
    end(slot);  // the round ended: nothing more is shown from it
    return -1;
  }
  const ssize_t n = ::read(slot.fd.get(), buffer, size);
  if (n > 0) {
    m_router.take(slot.ref, std::string_view(buffer, static_cast<size_t>(n)), scratch);
    return 1;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    return 0;
  }
  end(slot);
  return -1;
}

void StreamReaders::end(Slot& slot) {
  slot.done = true;
  (void)::epoll_ctl(slot.thread->epoll.get(), EPOLL_CTL_DEL, slot.fd.get(), nullptr);
  slot.fd.close();
}

int StreamReaders::read_now(Slot& slot, char* buffer, size_t size) {
  std::lock_guard lock(OutputRouter::mutex(slot.ref));
  if (slot.done) {
    return -1;
  }
  return pump(slot, buffer, size, m_scratch);
}

void StreamReaders::post_ended(Slot& slot) {
  {
    std::lock_guard lock(m_ended_mutex);
    m_ended.push_back(&slot);
  }
  signal_eventfd(m_ended_fd.get());
}

std::vector<StreamReaders::Slot*> StreamReaders::take_ended() {
  uint64_t count = 0;
  (void)!::read(m_ended_fd.get(), &count, sizeof(count));
  std::lock_guard lock(m_ended_mutex);
  if (!m_failure.empty()) {
    throw std::runtime_error("reading the workers' output: " + m_failure);
  }
  return std::exchange(m_ended, {});
}

void StreamReaders::run(Thread& t) {
  const auto buffer = std::make_unique_for_overwrite<char[]>(k_read_size);
  OutputRouter::Scratch scratch;
  epoll_event events[64];
  while (!m_stopping.load()) {
    const int n = ::epoll_wait(t.epoll.get(), events, 64, t.parked.empty() ? -1 : k_parked_poll_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        continue;  // stop() woke us
      }
      Slot& slot = *static_cast<Slot*>(events[i].data.ptr);
      std::unique_lock lock(OutputRouter::mutex(slot.ref));
      if (slot.done || slot.parked) {
        continue;  // an event from before it ended or was parked
      }
      int r = -1;
      try {
        r = pump(slot, buffer.get(), k_read_size, scratch);
      } catch (const std::exception& e) {
        // No exception may leave a thread: the loop hears of it instead.
        if (!slot.done) {
          end(slot);
        }
        std::lock_guard failed(m_ended_mutex);
        m_failure = e.what();
      }
      if (r < 0) {
        lock.unlock();
        post_ended(slot);
      } else if (r > 0 && !m_unbounded.load() && m_console.backlogged(slot.console_fd())) {
        // The console is behind: this worker waits on its pipe until there is room.
        epoll_event none{0, {.ptr = &slot}};
        (void)::epoll_ctl(t.epoll.get(), EPOLL_CTL_MOD, slot.fd.get(), &none);
        slot.parked = true;
        t.parked.push_back(&slot);
      }
    }
    std::erase_if(t.parked, [&](Slot* slot) {
      std::lock_guard lock(OutputRouter::mutex(slot->ref));
      if (slot->done) {
        return true;
      }
      if (!m_unbounded.load() && m_console.backlogged(slot->console_fd())) {
        return false;
      }
      epoll_event in{EPOLLIN, {.ptr = slot}};
      (void)::epoll_ctl(t.epoll.get(), EPOLL_CTL_MOD, slot->fd.get(), &in);
      slot->parked = false;
      return true;
    });
  }
}

void StreamReaders::stop() {
  m_stopping.store(true);
  for (auto& t : m_threads) {
    signal_eventfd(t->wake.get());
  }
  for (auto& t : m_threads) {
    if (t->thread.joinable()) {
      t->thread.join();
    }
  }
}

}  // namespace ddplaunch
