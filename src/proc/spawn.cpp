#include "proc/spawn.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "log.hpp"
#include "posix/error.hpp"
#include "posix/fd.hpp"
#include "posix/signals.hpp"
#include "proc/clone3.hpp"
#include "proc/prepare.hpp"
#include "proc/spawn_helper.hpp"

namespace ddplaunch {

namespace {

// The soft fd limit the user had, for the workers; unset: leave as is.
std::optional<rlimit> g_worker_nofile;

// What the child tells the parent through the memory they share.
struct ChildReport {
  volatile int shared = 0;  // set first thing: the memory really is shared
  volatile int error = 0;   // errno of the failed step
};

// Everything the child needs, prepared by the parent: the child allocates nothing.
struct ChildArgs {
  const Prepared* prepared = nullptr;
  pid_t parent = 0;
  int stdin_fd = 0, out_fd = 1, err_fd = 2;
  int progress_fd = -1;  // -1: none
  int report_fd = -1;    // -1: the report is read from shared memory only
  ChildReport* report = nullptr;
  bool own_group = true;
  posix::SignalReset signals;
  // >= 0: the child shares the launcher's fd table (CLONE_FILES) until it
  // unshares every fd from this one up (close_range's CLOSE_RANGE_UNSHARE):
  // the kernel then copies a handful of fds instead of all of them.
  int unshare_from = -1;
  volatile int* unshare_failed = nullptr;
  bool fail_unshare = false;  // a test's forced CLOSE_RANGE_UNSHARE failure
  char* stack = nullptr;      // the lane's stack for a clone3 child (stack_size bytes)
  size_t stack_size = 0;
};

// Runs in the child, which shares the launcher's memory (and, after vfork,
// its stack) until it calls execve or _exit: only async-signal-safe calls,
// no allocation, and no writes to memory except *report.
[[noreturn]] void exec_child(const ChildArgs& a) {
  a.report->shared = 1;
  if (a.own_group) {
    setpgid(0, 0);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != a.parent) {
    _exit(127);  // the launcher died before prctl took effect
  }
  if (a.unshare_from >= 0 &&
      (a.fail_unshare || syscall(SYS_close_range, static_cast<unsigned>(a.unshare_from), ~0U,
                                 CLOSE_RANGE_UNSHARE) != 0)) {
    // Still the launcher's table: touch nothing in it.
    *a.unshare_failed = 1;
    a.report->error = errno;
    _exit(127);
  }
  // The progress pipe becomes fd 3 (dup2 onto itself would keep close-on-exec).
  const int progress_fd = a.progress_fd;
  const bool progress_ok =
      progress_fd < 0 || (progress_fd == k_progress_fd ? fcntl(progress_fd, F_SETFD, 0) == 0
                                                       : dup2(progress_fd, k_progress_fd) >= 0);
  if ((a.stdin_fd == 0 || dup2(a.stdin_fd, 0) >= 0) && dup2(a.out_fd, 1) >= 0 &&
      dup2(a.err_fd, 2) >= 0 && progress_ok) {
    // Everything above 2 (or the progress fd) closes on exec, including fds
    // the launcher inherited.
    syscall(SYS_close_range, progress_fd < 0 ? 3U : static_cast<unsigned>(k_progress_fd) + 1, ~0U,
            CLOSE_RANGE_CLOEXEC);
    posix::reset_signals_for_child(a.signals);
    if (g_worker_nofile) {
      (void)setrlimit(RLIMIT_NOFILE, &*g_worker_nofile);
    }
    const Prepared& p = *a.prepared;
    if (!p.cpus.empty()) {
      // A CPU that went offline since the probe: run unbound rather than not at all.
      (void)sched_setaffinity(0, p.cpus.size() * sizeof(cpu_set_t), p.cpus.data());
    }
    execve(p.path.c_str(), p.argv.data(), p.envp.data());
  }
  const int err = errno;
  a.report->error = err;
  if (a.report_fd >= 0) {
    ssize_t ignored = write(a.report_fd, &err, sizeof(err));
    (void)ignored;
  }
  _exit(127);
}

// How children start here, settled by the first worker of the first round
// (alone) and read by both lanes afterwards; a switch to a fallback is made
// under g_mode_mutex.
//
// Whether vfork() really shares memory with the child: unknown (-1) until the
// first spawn, which then also uses the report pipe. Where it does (always,
// but under ThreadSanitizer or valgrind, which make it a fork), no later
// spawn needs a pipe: two system calls and two closes fewer per worker.
std::atomic<int> g_vfork_shares = -1;
// The job's cgroup (JobGuard), which workers are cloned straight into
// (clone3's CLONE_INTO_CGROUP), so that the launcher never migrates itself:
// a migration waits for an RCU grace period, about 12 ms here. -1: none, or
// the launcher moved into it instead (move_into_cgroup()).
std::atomic<int> g_cgroup_fd = -1;
// Whether clone3() may be tried; false once the kernel refused it here.
std::atomic<bool> g_clone3 = clone3_vfork_available();
// Whether a child may share the fd table until it unshares (false once
// CLOSE_RANGE_UNSHARE failed here).
std::atomic<bool> g_share_files = true;
std::mutex g_mode_mutex;
std::string g_cgroup_procs;  // under g_mode_mutex: the cgroup's cgroup.procs
SpawnFaults g_faults;        // set only while no worker starts
struct PathCounts {
  std::atomic<int> clone3{0}, vfork{0}, unshare_retries{0}, cgroup_moves{0};
} g_paths;

// The launcher moves itself into the job's cgroup (once), so that the
// workers it vforks are born there. Under g_mode_mutex.
void move_into_cgroup() {
  g_cgroup_fd = -1;
  if (g_cgroup_procs.empty()) {
    return;
  }
  const std::string self = std::to_string(getpid());
  posix::Fd procs(::open(g_cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC));
  if (!procs || ::write(procs.get(), self.data(), self.size()) < 0) {
    log::debug("workers are not in the job's cgroup: cannot move into {}: {}", g_cgroup_procs,
               std::strerror(errno));
  } else {
    ++g_paths.cgroup_moves;
  }
  g_cgroup_procs.clear();
}

[[noreturn]] void clone_child_main(void* a) {
  exec_child(*static_cast<const ChildArgs*>(a));
}

// clone3 failed with `err`. Out of processes or memory (EAGAIN: RLIMIT_NPROC
// or the cgroup's pids.max; ENOMEM; ENOSPC: the pid namespace is full) is
// this worker's error, and vfork would fail the same way: true. Anything
// else says clone3 cannot be used here (an older kernel: ENOSYS, E2BIG,
// EINVAL; a cgroup that refuses: EPERM, EACCES, EBUSY, EOPNOTSUPP): vfork
// from now on, and the launcher moves into the cgroup once so that workers
// are still born there: false.
bool clone3_failure_is_the_workers(int err) {
  if (err == EAGAIN || err == ENOMEM || err == ENOSPC) {
    return true;
  }
  std::lock_guard lock(g_mode_mutex);
  if (g_clone3.exchange(false)) {
    log::debug("workers start with vfork: clone3 failed here: {}", std::strerror(err));
    if (g_cgroup_fd >= 0) {
      move_into_cgroup();
    }
  }
  return false;
}

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

// Starts a child for `a` that shares the launcher's memory until it execs:
// with clone3 where it can (into the job's cgroup; sharing the fd table
// when a.unshare_from says so), else with vfork(). Returns the pid, or -1
// with errno.
pid_t start_child(ChildArgs& a) {
  if (const int cgroup = g_cgroup_fd; g_clone3 && (cgroup >= 0 || a.unshare_from >= 0)) {
    clone_args args = {};
    args.flags = CLONE_VM | CLONE_VFORK;
    if (cgroup >= 0) {
      args.flags |= CLONE_INTO_CGROUP;
      args.cgroup = static_cast<uint64_t>(cgroup);
    }
    if (a.unshare_from >= 0) {
      args.flags |= CLONE_FILES;
    }
    args.exit_signal = SIGCHLD;
    args.stack = reinterpret_cast<uintptr_t>(a.stack);
    args.stack_size = a.stack_size;
    const long pid = g_faults.clone3_errno != 0 ? -g_faults.clone3_errno
                                                : clone3_vfork(&args, clone_child_main, &a);
    if (pid >= 0) {
      ++g_paths.clone3;
      return static_cast<pid_t>(pid);
    }
    if (clone3_failure_is_the_workers(static_cast<int>(-pid))) {
      errno = static_cast<int>(-pid);
      return -1;
    }
  }
  a.unshare_from = -1;  // vfork copies the table: nothing to unshare
  asm volatile("" : : "r"(&a) : "memory");
  pid_t pid = vfork();
  asm volatile("" : : : "memory");
  if (pid == 0) {
    exec_child(a);
  }
  if (pid > 0) {
    ++g_paths.vfork;
  }
  return pid;
}

// Starts a child and waits until it has exec'd (or failed to): no page
// tables are copied, so launching costs what posix_spawn costs (which cannot
// set PR_SET_PDEATHSIG). The child reports an exec error in shared memory.
// Where vfork is really a fork nothing is shared, and the error comes
// through a close-on-exec pipe instead; only then does the parent wait on
// that pipe. Returns the pid, or -1 with the child's errno in *exec_errno
// (the child is reaped). A child that could not be started at all (out of
// processes or memory) throws SpawnError.
pid_t vfork_exec(ChildArgs a, int* exec_errno) {
  std::optional<posix::Pipe> pipe;
  if (g_vfork_shares != 1) {
    pipe = posix::make_pipe();
    a.report_fd = pipe->write.get();
  }
  ChildReport report;
  a.report = &report;
  volatile int unshare_failed = 0;
  a.unshare_failed = &unshare_failed;
  a.fail_unshare = g_faults.unshare_fails;
  // The child writes `report` in memory the compiler cannot see it share:
  // without start_child()'s barriers GCC folds the reads below to the
  // initial zeros.
  pid_t pid = start_child(a);
  if (pid > 0 && unshare_failed != 0) {
    // A kernel without CLOSE_RANGE_UNSHARE (before 5.9): reap the child and
    // start it again with a copied table, as every later one.
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    g_share_files = false;
    ++g_paths.unshare_retries;
    a.unshare_from = -1;
    report = ChildReport{};
    pid = start_child(a);
  }
  if (pid < 0) {
    const int err = errno;
    throw SpawnError(std::string("cannot start a worker process: ") + std::strerror(err) +
                     (err == EAGAIN ? " (the process limit is reached: ulimit -u, or the "
                                      "cgroup's pids.max)"
                                    : ""));
  }
  // Known after the first worker (alone): written once.
  g_vfork_shares.store(report.shared != 0 ? 1 : 0);
  int child_errno = report.error;
  if (report.shared == 0 && pipe) {
    pipe->write.close();
    ssize_t n;
    do {
      n = read(pipe->read.get(), &child_errno, sizeof(child_errno));
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof(child_errno))) {
      child_errno = 0;  // EOF: exec succeeded
    }
  }
  if (child_errno == 0) {
    return pid;
  }
  *exec_errno = child_errno;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return -1;
}

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

void spawn_into_cgroup(int cgroup_fd, const std::string& procs_path) {
  std::lock_guard lock(g_mode_mutex);
  g_cgroup_procs = procs_path;
  if (cgroup_fd >= 0 && g_clone3) {
    g_cgroup_fd = cgroup_fd;
    return;
  }
  // Without clone3 here: the launcher moves in, once.
  move_into_cgroup();
}

void set_spawn_faults_for_tests(const SpawnFaults& faults) {
  std::lock_guard lock(g_mode_mutex);
  g_faults = faults;
  g_clone3 = clone3_vfork_available();
  g_share_files = true;
  g_cgroup_fd = -1;
  g_cgroup_procs.clear();
  g_paths.clone3 = g_paths.vfork = g_paths.unshare_retries = g_paths.cgroup_moves = 0;
}

SpawnPaths spawn_paths_for_tests() {
  return {g_paths.clone3,       g_paths.vfork,   g_paths.unshare_retries,
          g_paths.cgroup_moves, g_clone3.load(), g_share_files.load()};
}

void raise_fd_limit_for_launcher() {
  g_worker_nofile = posix::raise_fd_limit();  // workers get back the limit the launcher was given
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
    args.unshare_from = g_share_files ? g_slots.top() + 1 : -1;
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

}  // namespace

std::vector<Child> spawn_workers(const std::vector<WorkerSpec>& workers) {
  // Each worker's argv and envp are built just before it starts and freed
  // after: with thousands of workers, holding them all would cost kilobytes
  // per worker at the launcher's peak. A missing program still fails at the
  // first worker, before any other starts.
  SpawnContext ctx;
  ctx.slots = g_slots.devnull >= 0;
  posix::Fd devnull;
  if (!ctx.slots) {
    devnull = posix::Fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull) {
      posix::throw_errno("open /dev/null");
    }
  }
  ctx.devnull = ctx.slots ? g_slots.devnull : devnull.get();
  make_fd_room(ctx.devnull, workers.size());
  // The slots hold the last worker's pipe ends until parked on /dev/null
  // again: otherwise its output would never reach EOF.
  struct Park {
    bool on;
    ~Park() {
      if (on) {
        for (const auto& lane : g_slots.lanes) {
          for (int slot : {lane.out, lane.err, lane.progress}) {
            ::dup3(g_slots.devnull, slot, O_CLOEXEC);
          }
        }
      }
    }
  } park{ctx.slots};
  ctx.self = getpid();
  ctx.foreground = isatty(0) != 0 && tcgetpgrp(0) == getpgrp();
  ctx.signals = posix::signals_to_reset();
  std::vector<Child> started;
  started.reserve(workers.size());
  ProgramCache programs;
  if (workers.empty()) {
    return started;
  }
  // The first worker alone: it settles how children start here (clone3 or
  // vfork, a shared fd table or not, shared memory or a real fork).
  started.push_back(spawn_one(workers[0], ctx, g_slots.lanes[0], programs));
  SpawnHelper* helper = nullptr;
  size_t mid = workers.size();
  // The second half, on the helper; on the first failure either lane stops
  // the other, and every worker started is killed and reaped (by its Child).
  std::vector<Child> second;
  std::exception_ptr second_error;
  std::atomic<bool> failed = false;
  if (workers.size() >= k_parallel_from && ctx.slots && g_vfork_shares == 1 && several_cpus()) {
    mid = (workers.size() + 1) / 2;
    second.reserve(workers.size() - mid);
    helper = &SpawnHelper::get();
    const bool posted = helper->post([&] {
      try {
        ProgramCache own;
        for (size_t i = mid; i < workers.size() && !failed; ++i) {
          second.push_back(spawn_one(workers[i], ctx, g_slots.lanes[1], own));
        }
      } catch (...) {
        second_error = std::current_exception();
        failed = true;
      }
    });
    if (!posted) {
      helper = nullptr;
      mid = workers.size();
    }
  }
  struct Join {
    SpawnHelper* helper;
    ~Join() {
      if (helper != nullptr) {
        helper->wait();
      }
    }
  } join{helper};
  try {
    for (size_t i = 1; i < mid && !failed; ++i) {
      started.push_back(spawn_one(workers[i], ctx, g_slots.lanes[0], programs));
    }
  } catch (...) {
    failed = true;
    throw;  // after the helper stops (Join), its workers are killed with ours
  }
  if (helper != nullptr) {
    helper->wait();
    join.helper = nullptr;
    if (second_error) {
      std::rethrow_exception(second_error);
    }
    for (auto& child : second) {
      started.push_back(std::move(child));
    }
  }
  return started;
}

void retire_spawn_thread() {
  SpawnHelper::get().retire();
}

}  // namespace ddplaunch
