// How a child starts: the child's own steps up to execve (exec_child), the
// choice of clone3 or vfork and its fallbacks, and the report of an exec
// failure through shared memory (or a pipe where vfork is a fork).
#include "proc/vfork_exec.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "log.hpp"
#include "posix/fd.hpp"
#include "proc/clone3.hpp"
#include "proc/spawn.hpp"

namespace ddplaunch {

namespace {

// The soft fd limit the user had, for the workers; unset: leave as is.
std::optional<rlimit> g_worker_nofile;

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

}  // namespace

// No page tables are copied, so launching costs what posix_spawn costs
// (which cannot set PR_SET_PDEATHSIG). The child reports an exec error in
// shared memory. Where vfork is really a fork nothing is shared, and the
// error comes through a close-on-exec pipe instead; only then does the
// parent wait on that pipe.
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

bool vfork_shares_memory() {
  return g_vfork_shares == 1;
}

bool share_fd_table() {
  return g_share_files;
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

}  // namespace ddplaunch
