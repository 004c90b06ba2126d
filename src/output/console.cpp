#include "output/console.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "log.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

namespace {

// One write(2) at most: a reader slower than this per exit_stall still shows progress.
constexpr size_t k_max_write = 64 * 1024;
constexpr size_t k_gone = SIZE_MAX;
// Written buffers kept for the next batches: a fresh 128 KiB string per batch
// is a fresh mmap, and its page faults cost more than the copy (4.6x slower
// output at 800 MB).
constexpr size_t k_spares = 4;
constexpr size_t k_max_spare_capacity = 1024 * 1024;

// Whether fds 1 and 2 are the same file (a terminal, `2>&1`): then one lane
// keeps the order in which lines were taken across both.
// Whether a write to `fd` can be tried without blocking (see Lane::direct).
// How often push() tries the lane's lock before it sleeps on it.
constexpr int k_push_spins = 200;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// What the console's fds are, read once.
struct FdKind {
  struct stat st = {};  // before `ok`, which fills it
  bool ok = false;
  explicit FdKind(int fd) : ok(fstat(fd, &st) == 0) {}
  // A write that never waits for a reader: a pipe or socket (non-blocking
  // writes), /dev/null.
  bool nowait_writable() const {
    return ok && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ||
                  (S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3)));
  }
  bool same_file(const FdKind& other) const {
    return ok && other.ok && st.st_dev == other.st.st_dev && st.st_ino == other.st.st_ino;
  }
};

}  // namespace

// One queue and one thread writing it, for one file (stdout, stderr, or both).
struct ConsoleWriter::Lane {
  struct Item {
    int fd;
    bool droppable;
    std::string bytes;
  };

  Lane(const Limits& l, int wake_eventfd) : limits(l), wake_fd(wake_eventfd) {}

  // Under `mutex`. With `own` (data is its start): its buffer is queued as
  // it is when it starts an item, and a spare (or empty) one is left in its
  // place. Spares keep their size: refilling them never zeroes them first.
  void push_locked(int fd, std::string_view data, bool droppable, std::string* own = nullptr) {
    const size_t size = data.size();
    if (!items.empty() && items.back().fd == fd && items.back().droppable == droppable &&
        items.back().bytes.size() < k_max_write) {
      items.back().bytes.append(data);  // fewer, larger writes for a busy rank
    } else if (own != nullptr) {
      own->resize(size);  // shorter: the data stays where it is
      items.push_back(Item{fd, droppable, std::move(*own)});
      *own = std::string();
      if (!spare.empty()) {
        *own = std::move(spare.back());
        spare.pop_back();
      }
    } else {
      std::string bytes;
      if (!spare.empty()) {
        bytes = std::move(spare.back());
        spare.pop_back();
      }
      bytes.assign(data);
      items.push_back(Item{fd, droppable, std::move(bytes)});
    }
    if (droppable) {
      queued_worker += size;
    }
  }

  // False when that stream is gone. `own`: as push_locked()'s; scratch afterwards.
  bool push(int fd, std::string_view data, bool droppable, std::string* own = nullptr) {
    bool notify = false;
    {
      // Reader threads (output/stream_readers.hpp) push here at once, each for
      // a write's time: a short spin is cheaper than sleeping on the futex.
      std::unique_lock lock(mutex, std::try_to_lock);
      for (int spin = 0; !lock.owns_lock() && spin < k_push_spins; ++spin) {
        cpu_relax();
        (void)lock.try_lock();
      }
      if (!lock.owns_lock()) {
        lock.lock();
      }
      if (gone[fd]) {
        return false;
      }
      if (droppable && dropped_bytes > 0 && queued_worker <= limits.backpressure_at / 2) {
        push_locked(fd, drop_notice(), false);  // caught up: say what was not shown
        dropped_bytes = dropped_lines = 0;
      }
      if (droppable && queued_worker + data.size() > limits.drop_beyond) {
        dropped_bytes += data.size();
        dropped_lines += static_cast<size_t>(std::count(data.begin(), data.end(), '\n'));
        return true;
      }
      if (items.empty() && (idle || !started) && direct[fd]) {
        // Nothing is queued or being written: the caller writes it itself
        // (no hand-off, no wake-up), and queues only what would block.
        const size_t n = write_now(fd, data);
        if (n == k_gone) {
          gone[fd] = true;
          return false;
        }
        if (n == data.size()) {
          return true;  // `own` stays the caller's, to fill again
        }
        data.remove_prefix(n);
        own = nullptr;  // the rest is copied
      }
      push_locked(fd, data, droppable, own);
      notify = idle;  // a busy writer finds the item without a wake-up (a futex call)
      start_locked();
    }
    if (notify) {
      wake.notify_one();
    }
    return true;
  }

  std::string drop_notice() const {
    return "ddplaunch: warning: the console did not keep up: " + std::to_string(dropped_lines) +
           " line(s) (" + std::to_string(dropped_bytes) +
           " bytes) of worker output were not shown here; --log-dir keeps every byte\n";
  }

  // One try at writing `bytes` that never blocks (RWF_NOWAIT): the bytes
  // written (0: it would block), or k_gone when the stream is gone. A file
  // that does not take RWF_NOWAIT is left to the thread from then on.
  size_t write_now(int fd, std::string_view bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      iovec v{const_cast<char*>(bytes.data() + sent), bytes.size() - sent};
      const ssize_t n = ::pwritev2(real_fd[fd], &v, 1, -1, RWF_NOWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        written.fetch_add(static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS)) {
        direct[fd] = false;
        break;
      } else if (n < 0 && (errno == EPIPE || errno == EBADF || errno == EIO)) {
        return k_gone;
      } else {
        break;  // EAGAIN: full
      }
    }
    return sent;
  }

  // Writes all of `bytes` to `fd`, waiting while it is not writable; false
  // when the stream is gone or the writer was told to give up.
  bool write_out(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd, bytes.data(), std::min(bytes.size(), k_max_write));
      if (n > 0) {
        bytes.remove_prefix(static_cast<size_t>(n));
        written.fetch_add(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && errno == EAGAIN) {
        // An O_NONBLOCK stdout (its reader set it, or a parent did): wait, do not drop.
        pollfd p{fd, POLLOUT, 0};
        while (!give_up.load() && ::poll(&p, 1, 100) == 0) {
        }
        if (give_up.load()) {
          return false;
        }
        continue;
      }
      return false;  // EPIPE (`| head`), EBADF, EIO: this stream is gone
    }
    return true;
  }

  void run() {
    std::unique_lock lock(mutex);
    while (true) {
      idle = true;
      wake.wait(lock, [&] { return !items.empty() || stopping; });
      idle = false;
      if (items.empty() || give_up.load()) {
        break;
      }
      Item item = std::move(items.front());
      items.pop_front();
      const bool skip = gone[item.fd];
      lock.unlock();
      const bool ok = skip || write_out(real_fd[item.fd], item.bytes);
      lock.lock();
      if (item.droppable) {
        queued_worker -= item.bytes.size();
        if (awaited && queued_worker <= limits.backpressure_at / 2) {
          awaited = false;
          const uint64_t one = 1;
          (void)!::write(wake_fd, &one, sizeof(one));  // the loop reads the workers again
        }
      }
      if (!ok) {
        gone[item.fd] = true;
      }
      if (spare.size() < k_spares && item.bytes.capacity() <= k_max_spare_capacity) {
        spare.push_back(std::move(item.bytes));
      }
    }
    finished = true;
    done.notify_all();
  }

  const Limits& limits;
  const int wake_fd;
  std::mutex mutex;
  std::condition_variable wake;  // items queued, or stopping
  std::condition_variable done;  // finished
  std::deque<Item> items;
  std::vector<std::string> spare;  // written buffers, emptied, for the next items
  // Worker output bytes in `items`: changed under `mutex`, read without it
  // by backlogged()'s quick answer.
  std::atomic<size_t> queued_worker{0};
  size_t dropped_bytes = 0;  // dropped since the last notice
  size_t dropped_lines = 0;
  int real_fd[3] = {-1, 1, 2};  // streams 1 and 2: the fds written
  // Whether the pushing thread may write stream 1 or 2 itself while the
  // queue is empty: a pipe, a socket or /dev/null, whose writes can be tried
  // without blocking. Never a terminal (Ctrl-S) or a file (NFS can block
  // whatever the flags say): those are the thread's alone.
  bool direct[3] = {false, false, false};
  bool gone[3] = {false, false, false};
  bool awaited = false;  // the loop waits for room (backlogged() said so)
  bool stopping = false;
  bool idle = false;  // the writer waits for items: a push must wake it
  bool finished = false;
  // The thread starts with the first item queued: a console that takes every
  // write at once (a pipe with room, /dev/null) never needs it, and a launch
  // does not pay for it.
  bool started = false;
  std::function<void()> start_thread;

  // Under `mutex`.
  void start_locked() {
    if (!started) {
      started = true;
      start_thread();
    }
  }
  std::atomic<size_t> written{0};
  std::atomic<bool> give_up{false};
};

struct ConsoleWriter::State : log::LineOutput {
  explicit State(Limits l) : limits(l), wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

  void write_line(std::string_view line) override { lane(2).push(2, line, false); }

  Lane& lane(int fd) { return *lanes[fd == 2 && lanes[1] ? 1 : 0]; }

  const Limits limits;
  posix::Fd wake;
  std::unique_ptr<Lane> lanes[2];  // [1] is null when fds 1 and 2 are the same file
};

ConsoleWriter::ConsoleWriter(Limits limits, int out, int err)
    : m_state(std::make_shared<State>(limits)) {
  if (!m_state->wake) {
    throw std::system_error(errno, std::generic_category(), "eventfd");
  }
  const FdKind out_kind(out), err_kind(err);
  m_state->lanes[0] = std::make_unique<Lane>(m_state->limits, m_state->wake.get());
  if (!out_kind.same_file(err_kind)) {
    m_state->lanes[1] = std::make_unique<Lane>(m_state->limits, m_state->wake.get());
  }
  for (auto& lane : m_state->lanes) {
    if (lane) {
      lane->real_fd[1] = out;
      lane->real_fd[2] = err;
      lane->direct[1] = out_kind.nowait_writable();
      lane->direct[2] = err_kind.nowait_writable();
      // The thread holds the state too: if the console never takes the last
      // bytes, it is left blocked in write(2) when the launcher exits.
      lane->start_thread = [weak = std::weak_ptr<State>(m_state), l = lane.get()] {
        if (auto state = weak.lock()) {
          std::thread([state, l] { l->run(); }).detach();
        }
      };
    }
  }
  log::set_output(m_state.get());
}

ConsoleWriter::~ConsoleWriter() {
  finish({});
}

bool ConsoleWriter::finish(const std::function<bool()>& stop) {
  if (m_finished) {
    return true;
  }
  m_finished = true;
  std::vector<Lane*> lanes;
  for (auto& lane : m_state->lanes) {
    if (lane) {
      lanes.push_back(lane.get());
      std::lock_guard lock(lane->mutex);
      if (lane->dropped_bytes > 0) {
        lane->push_locked(lane == m_state->lanes[0] ? 1 : 2, lane->drop_notice(), false);
      }
      lane->stopping = true;
      if (!lane->started && lane->items.empty()) {
        lane->finished = true;  // nothing was ever queued: no thread to wait for
      } else {
        lane->start_locked();
      }
      lane->wake.notify_all();
    }
  }
  // Wait while any lane still writes, and while the console takes bytes; a
  // stop signal (asked every 100 ms) ends the wait at once.
  size_t seen = 0;
  bool stopped = false;
  auto last_progress = std::chrono::steady_clock::now();
  for (Lane* lane : lanes) {
    std::unique_lock lock(lane->mutex);
    while (!lane->finished) {
      lane->done.wait_for(lock, std::chrono::milliseconds(100));
      size_t total = 0;
      for (Lane* l : lanes) {
        total += l->written.load();
      }
      if (!lane->finished && (stopped || (stop && stop()))) {
        stopped = true;
        lane->give_up.store(true);
        break;
      }
      if (total != seen) {
        seen = total;
        last_progress = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - last_progress > m_state->limits.exit_stall) {
        lane->give_up.store(true);  // nobody reads it: exit with what was shown
        break;
      }
    }
  }
  if (m_state->lane(2).give_up.load()) {
    log::abandon_console();  // main's last error line must not block the exit either
    return !stopped;
  }
  log::set_output(nullptr);
  if (stopped) {
    log::warn(
        "stopped by a signal while the output drained: the rest of the workers' output "
        "was not shown");
  } else if (m_state->lane(1).give_up.load()) {
    log::warn("stdout took nothing for {} s: the rest of the workers' output was not shown",
              std::chrono::duration<double>(m_state->limits.exit_stall).count());
  }
  return !stopped;
}

bool ConsoleWriter::write(int fd, std::string_view data) {
  return (fd == 1 || fd == 2) && m_state->lane(fd).push(fd, data, true);
}

bool ConsoleWriter::write_swap(int fd, std::string& data, size_t size) {
  if (fd != 1 && fd != 2) {
    return false;
  }
  return m_state->lane(fd).push(fd, std::string_view(data).substr(0, size), true, &data);
}

void ConsoleWriter::write_own(int fd, std::string_view data) {
  if (fd == 1 || fd == 2) {
    m_state->lane(fd).push(fd, data, false);
  }
}

bool ConsoleWriter::backlogged(int fd) {
  if (fd != 1 && fd != 2) {
    return false;
  }
  Lane& lane = m_state->lane(fd);
  if (lane.queued_worker.load(std::memory_order_relaxed) < m_state->limits.backpressure_at) {
    return false;  // the common answer, without the lock the reader threads share
  }
  std::lock_guard lock(lane.mutex);
  if (lane.queued_worker < m_state->limits.backpressure_at || lane.gone[fd]) {
    return false;
  }
  lane.awaited = true;
  return true;
}

int ConsoleWriter::wake_fd() const {
  return m_state->wake.get();
}

void ConsoleWriter::read_wake() {
  uint64_t count = 0;
  (void)!::read(m_state->wake.get(), &count, sizeof(count));
}

}  // namespace ddplaunch
