#include "proc/spawn.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "posix/error.hpp"
#include "posix/fd.hpp"
#include "posix/signals.hpp"
#include "proc/prepare.hpp"
#include "proc/spawn_helper.hpp"
#include "proc/vfork_exec.hpp"

namespace ddplaunch {

namespace {

// Workers start from two threads (lanes) when there are several and the
// launcher may use two CPUs: while one thread waits for its child's execve,
// the other starts the next. Each lane has its own slots and child stack.
constexpr int k_lanes = 2;
// From this many workers in one round on. On a 2-CPU VM (docs/PERFORMANCE.md)
// two lanes cost 0.2 ms more at 4 workers, are even at 8 and 16 (the
// workers' own starts fill both CPUs) and gain 1.4 ms at 32 and 3 ms at 64;
// with more CPUs than workers the lanes do not compete with those starts.
constexpr size_t k_parallel_from = 8;

// One lane's fd slots (see SpawnSlots) and its clone3 child's stack, in use
// only while the lane's thread sleeps (CLONE_VFORK).
struct SpawnLane {
  int out = -1, err = -1, progress = -1;
  alignas(64) char stack[64 * 1024];
};

// Low fd numbers reserved at start (reserve_spawn_slots()). What a worker
// gets as stdin, stdout, stderr and progress fd is dup3()ed there just before
// it starts, so that a child sharing the launcher's fd table needs only the
// fds below slots.top(): with thousands of workers the launcher holds
// thousands of pipes, which every child would otherwise copy and close again
// at exec (110 ms for 1,024 workers here).
struct SpawnSlots {
  int devnull = -1;
  SpawnLane lanes[k_lanes];
  int top() const {
    int top = devnull;
    for (const auto& lane : lanes) {
      top = std::max({top, lane.out, lane.err, lane.progress});
    }
    return top;
  }
};
SpawnSlots g_slots;

}  // namespace

void reserve_spawn_slots() {
  if (g_slots.devnull >= 0) {
    return;
  }
  // Inherited fds (a parent's leak) must not reach workers: marked once
  // here, as every fd the launcher opens itself is close-on-exec.
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  int fds[1 + 3 * k_lanes];
  for (int& fd : fds) {
    fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return;  // (leaks what was opened: the launcher runs without slots)
    }
  }
  const int* next = fds;
  for (auto& lane : g_slots.lanes) {
    lane.out = *next++;
    lane.err = *next++;
    lane.progress = *next++;
  }
  g_slots.devnull = *next;
}

namespace {

// What every worker of one spawn_workers() call shares.
struct SpawnContext {
  pid_t self = 0;
  bool slots = false;
  int devnull = -1;
  // Rank 0 reading the launcher's terminal (input(), pdb) must be in the
  // terminal's foreground process group, or it is stopped by SIGTTIN: when
  // the launcher is in the foreground, rank 0 stays in its process group.
  bool foreground = false;
  posix::SignalReset signals;
};

// Starts one worker from `lane`'s slots and stack.
Child spawn_one(const WorkerSpec& worker, const SpawnContext& ctx, SpawnLane& lane,
                ProgramCache& programs) {
  const Prepared prepared = prepare(worker, programs);
  auto out = worker.stdout_tty ? posix::make_pty() : posix::make_pipe();
  auto err = posix::make_pipe();
  std::optional<posix::Pipe> progress;
  if (worker.progress_pipe) {
    progress = posix::make_pipe();
  }
  ChildArgs args;
  args.prepared = &prepared;
  args.parent = ctx.self;
  args.stdin_fd = worker.inherit_stdin ? 0 : ctx.devnull;
  args.out_fd = out.write.get();
  args.err_fd = err.write.get();
  args.progress_fd = progress ? progress->write.get() : -1;
  args.stack = lane.stack;
  args.stack_size = sizeof(lane.stack);
  if (ctx.slots) {
    // dup3 onto a slot closes the previous worker's end there.
    if (::dup3(out.write.get(), lane.out, O_CLOEXEC) < 0 ||
        ::dup3(err.write.get(), lane.err, O_CLOEXEC) < 0 ||
        (progress && ::dup3(progress->write.get(), lane.progress, O_CLOEXEC) < 0)) {
      posix::throw_errno("dup3");
    }
    args.out_fd = lane.out;
    args.err_fd = lane.err;
    args.progress_fd = progress ? lane.progress : -1;
    args.unshare_from = share_fd_table() ? g_slots.top() + 1 : -1;
  }
  args.own_group = !(worker.inherit_stdin && ctx.foreground);
  args.signals = ctx.signals;
  int exec_errno = 0;
  pid_t pid = vfork_exec(args, &exec_errno);
  if (pid < 0) {
    throw SpawnError("cannot execute '" + worker.argv.at(0) + "': " + std::strerror(exec_errno));
  }
  // A fresh pipe's read end has no other status flag: one fcntl, not two.
  ::fcntl(out.read.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err.read.get(), F_SETFL, O_NONBLOCK);
  Child child(pid, std::move(out.read), std::move(err.read), args.own_group);
  if (progress) {
    ::fcntl(progress->read.get(), F_SETFL, O_NONBLOCK);
    child.progress() = std::move(progress->read);
  }
  return child;
}

// Grows the fd table, once, to hold every worker's pipes. The kernel grows
// it by doubling as fds are opened, and growing a table that another thread
// or a CLONE_FILES child shares waits for an RCU grace period
// (expand_fdtable's synchronize_rcu): 25 ms each on a 16-CPU VM, so that 24
// workers took 31 ms to start where 20 took 4.5, and 1,024 paid it six
// times. Grown here, before the second lane or any child exists, it is not
// shared: the growth costs no wait. (An fd above the limit: nothing done.)
void make_fd_room(int any_fd, size_t workers) {
  const int lowest = ::fcntl(any_fd, F_DUPFD_CLOEXEC, 0);
  if (lowest < 0) {
    return;
  }
  ::close(lowest);
  // Each worker keeps two or three read ends and briefly two or three write
  // ends; what else the launcher opens meanwhile is in the margin.
  const size_t want = static_cast<size_t>(lowest) + 4 * workers + 64;
  if (want < static_cast<size_t>(std::numeric_limits<int>::max())) {
    if (const int top = ::fcntl(any_fd, F_DUPFD_CLOEXEC, static_cast<int>(want)); top >= 0) {
      ::close(top);
    }
  }
}

// Whether this process may run on two CPUs or more.
bool several_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) > 1;
}

// What the workers of one spawn_workers() call share, with /dev/null as
// their stdin (a slot, or DEVNULL opened here where there are none).
SpawnContext make_context(posix::Fd& devnull, size_t workers) {
  SpawnContext ctx;
  ctx.slots = g_slots.devnull >= 0;
  if (!ctx.slots) {
    devnull = posix::Fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull) {
      posix::throw_errno("open /dev/null");
    }
  }
  ctx.devnull = ctx.slots ? g_slots.devnull : devnull.get();
  make_fd_room(ctx.devnull, workers);
  ctx.self = getpid();
  ctx.foreground = isatty(0) != 0 && tcgetpgrp(0) == getpgrp();
  ctx.signals = posix::signals_to_reset();
  return ctx;
}

// The slots hold the last worker's pipe ends until parked on /dev/null
// again: otherwise its output would never reach EOF.
struct ParkSlots {
  bool on;
  ~ParkSlots() {
    if (on) {
      for (const auto& lane : g_slots.lanes) {
        for (int slot : {lane.out, lane.err, lane.progress}) {
          ::dup3(g_slots.devnull, slot, O_CLOEXEC);
        }
      }
    }
  }
};

// The upper half of a round's workers, started on the helper thread from
// the second lane; on the first failure either lane stops the other (FAILED),
// and every worker started is killed and reaped (by its Child). Destroyed
// only once the helper is idle.
class SecondLane {
 public:
  SecondLane() = default;
  SecondLane(const SecondLane&) = delete;
  SecondLane& operator=(const SecondLane&) = delete;
  ~SecondLane() {
    if (m_helper != nullptr) {
      m_helper->wait();
    }
  }

  // Starts workers [from, end) on the helper; false (nothing started) where
  // it takes no work.
  bool start(const std::vector<WorkerSpec>& workers, size_t from, const SpawnContext& ctx,
             std::atomic<bool>& failed) {
    m_started.reserve(workers.size() - from);
    SpawnHelper* helper = &SpawnHelper::get();
    const bool posted = helper->post([this, &workers, from, &ctx, &failed] {
      try {
        ProgramCache own;
        for (size_t i = from; i < workers.size() && !failed; ++i) {
          m_started.push_back(spawn_one(workers[i], ctx, g_slots.lanes[1], own));
        }
      } catch (...) {
        m_error = std::current_exception();
        failed = true;
      }
    });
    m_helper = posted ? helper : nullptr;
    return posted;
  }

  // Waits for the helper, rethrows its error, or appends its workers.
  void finish(std::vector<Child>& started) {
    if (m_helper == nullptr) {
      return;
    }
    std::exchange(m_helper, nullptr)->wait();
    if (m_error) {
      std::rethrow_exception(m_error);
    }
    for (auto& child : m_started) {
      started.push_back(std::move(child));
    }
  }

 private:
  SpawnHelper* m_helper = nullptr;
  std::vector<Child> m_started;
  std::exception_ptr m_error;
};

}  // namespace

std::vector<Child> spawn_workers(const std::vector<WorkerSpec>& workers) {
  // Each worker's argv and envp are built just before it starts and freed
  // after: with thousands of workers, holding them all would cost kilobytes
  // per worker at the launcher's peak. A missing program still fails at the
  // first worker, before any other starts.
  posix::Fd devnull;
  const SpawnContext ctx = make_context(devnull, workers.size());
  const ParkSlots park{ctx.slots};
  std::vector<Child> started;
  started.reserve(workers.size());
  ProgramCache programs;
  if (workers.empty()) {
    return started;
  }
  // The first worker alone: it settles how children start here (clone3 or
  // vfork, a shared fd table or not, shared memory or a real fork).
  started.push_back(spawn_one(workers[0], ctx, g_slots.lanes[0], programs));
  size_t mid = workers.size();
  std::atomic<bool> failed = false;
  SecondLane second;
  if (workers.size() >= k_parallel_from && ctx.slots && vfork_shares_memory() && several_cpus() &&
      second.start(workers, (workers.size() + 1) / 2, ctx, failed)) {
    mid = (workers.size() + 1) / 2;
  }
  try {
    for (size_t i = 1; i < mid && !failed; ++i) {
      started.push_back(spawn_one(workers[i], ctx, g_slots.lanes[0], programs));
    }
  } catch (...) {
    failed = true;
    throw;  // after the helper stops (~SecondLane), its workers are killed with ours
  }
  second.finish(started);
  return started;
}

void retire_spawn_thread() {
  SpawnHelper::get().retire();
}

}  // namespace ddplaunch
