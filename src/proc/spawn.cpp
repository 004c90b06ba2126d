#include "proc/spawn.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <optional>

#include "posix/error.hpp"
#include "posix/fd.hpp"
#include "posix/signals.hpp"

namespace ddplaunch {

namespace {

// The soft fd limit the user had, for the workers; unset: leave as is.
std::optional<rlimit> g_worker_nofile;

struct Prepared {
  std::string path;
  std::vector<std::string> env_strings;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<cpu_set_t> cpus;  // the affinity to set before exec; empty: inherited
};

Prepared prepare(const WorkerSpec& spec) {
  Prepared p;
  const EnvMap env = spec.env.full();
  auto path = find_program(spec.argv.at(0), env);
  if (!path) {
    throw SpawnError("cannot execute '" + spec.argv[0] +
                     "': not found (no such file, or not in PATH); check the program name");
  }
  p.path = *path;
  p.env_strings.reserve(env.size());
  for (const auto& [k, v] : env) {
    p.env_strings.push_back(k + "=" + v);
  }
  for (const auto& a : spec.argv) {
    p.argv.push_back(const_cast<char*>(a.c_str()));
  }
  p.argv.push_back(nullptr);
  for (auto& e : p.env_strings) {
    p.envp.push_back(e.data());
  }
  p.envp.push_back(nullptr);
  if (!spec.cpus.empty()) {
    const int highest = *std::max_element(spec.cpus.begin(), spec.cpus.end());
    p.cpus.resize(static_cast<size_t>(highest) / CPU_SETSIZE + 1);
    for (auto& set : p.cpus) {
      CPU_ZERO(&set);
    }
    const size_t bytes = p.cpus.size() * sizeof(cpu_set_t);
    for (int c : spec.cpus) {
      CPU_SET_S(static_cast<size_t>(c), bytes, p.cpus.data());
    }
  }
  return p;
}

// What the vfork()ed child tells the parent through the memory they share.
struct ChildReport {
  volatile int shared = 0;  // set first thing: the memory really is shared
  volatile int error = 0;   // errno of the failed step
};

// Runs in the vfork()ed child, which shares the launcher's memory and stack
// until it calls execve or _exit: only async-signal-safe calls, no
// allocation, and no writes to memory except *report.
[[noreturn]] void exec_child(const Prepared& p, pid_t parent, int stdin_fd, int out_fd, int err_fd,
                             int progress_fd, int report_fd, ChildReport* report, bool own_group) {
  report->shared = 1;
  if (own_group) {
    setpgid(0, 0);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) {
    _exit(127);  // the launcher died before prctl took effect
  }
  // The progress pipe becomes fd 3 (dup2 onto itself would keep close-on-exec).
  const bool progress_ok =
      progress_fd < 0 || (progress_fd == k_progress_fd ? fcntl(progress_fd, F_SETFD, 0) == 0
                                                       : dup2(progress_fd, k_progress_fd) >= 0);
  if ((stdin_fd == 0 || dup2(stdin_fd, 0) >= 0) && dup2(out_fd, 1) >= 0 && dup2(err_fd, 2) >= 0 &&
      progress_ok) {
    // Everything above 2 (or the progress fd) closes on exec, including fds
    // the launcher inherited.
    syscall(SYS_close_range, progress_fd < 0 ? 3U : static_cast<unsigned>(k_progress_fd) + 1, ~0U,
            CLOSE_RANGE_CLOEXEC);
    posix::reset_signals_for_child();
    if (g_worker_nofile) {
      (void)setrlimit(RLIMIT_NOFILE, &*g_worker_nofile);
    }
    if (!p.cpus.empty()) {
      // A CPU that went offline since the probe: run unbound rather than not at all.
      (void)sched_setaffinity(0, p.cpus.size() * sizeof(cpu_set_t), p.cpus.data());
    }
    execve(p.path.c_str(), p.argv.data(), p.envp.data());
  }
  const int err = errno;
  report->error = err;
  ssize_t ignored = write(report_fd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

// vfork(): the parent sleeps until the child has exec'd (or failed to), and no
// page tables are copied, so launching costs what posix_spawn costs (which
// cannot set PR_SET_PDEATHSIG). The child reports an exec error in shared
// memory. Where vfork is really a fork (ThreadSanitizer makes it one) nothing
// is shared, and the error comes through a close-on-exec pipe instead; only
// then does the parent wait on that pipe. Returns the pid, or -1 with the
// child's errno in *exec_errno (the child is reaped).
pid_t vfork_exec(const Prepared& p, pid_t parent, int stdin_fd, int out_fd, int err_fd,
                 int progress_fd, int* exec_errno, bool own_group) {
  auto pipe = posix::make_pipe();
  const int report_fd = pipe.write.get();
  ChildReport report;
  pid_t pid = vfork();
  if (pid == 0) {
    exec_child(p, parent, stdin_fd, out_fd, err_fd, progress_fd, report_fd, &report, own_group);
  }
  if (pid < 0) {
    posix::throw_errno("vfork");
  }
  pipe.write.close();
  int child_errno = report.error;
  if (report.shared == 0) {
    ssize_t n;
    do {
      n = read(pipe.read.get(), &child_errno, sizeof(child_errno));
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

std::optional<std::string> find_program(const std::string& program, const EnvMap& env) {
  if (program.empty()) {
    return std::nullopt;
  }
  if (program.find('/') != std::string::npos) {
    return access(program.c_str(), F_OK) == 0 ? std::optional(program) : std::nullopt;
  }
  auto it = env.find("PATH");
  std::string path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  std::optional<std::string> first_existing;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) {
      end = path.size();
    }
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (!first_existing && access(candidate.c_str(), F_OK) == 0) {
      first_existing = candidate;  // exists but not executable: exec reports EACCES
    }
    start = end + 1;
  }
  return first_existing;
}

void raise_fd_limit_for_launcher() {
  g_worker_nofile = posix::raise_fd_limit();  // workers get back the limit the launcher was given
}

std::vector<Child> spawn_workers(const std::vector<WorkerSpec>& workers) {
  // Each worker's argv and envp are built just before it starts and freed
  // after: with thousands of workers, holding them all would cost kilobytes
  // per worker at the launcher's peak. A missing program still fails at the
  // first worker, before any other starts.
  posix::Fd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull) {
    posix::throw_errno("open /dev/null");
  }
  const pid_t self = getpid();
  // Rank 0 reading the launcher's terminal (input(), pdb) must be in the
  // terminal's foreground process group, or it is stopped by SIGTTIN: when
  // the launcher is in the foreground, rank 0 stays in its process group.
  const bool foreground = isatty(0) != 0 && tcgetpgrp(0) == getpgrp();
  std::vector<Child> started;
  started.reserve(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    auto out = posix::make_pipe();
    auto err = posix::make_pipe();
    std::optional<posix::Pipe> progress;
    if (workers[i].progress_pipe) {
      progress = posix::make_pipe();
    }
    int stdin_fd = workers[i].inherit_stdin ? 0 : devnull.get();
    const bool own_group = !(workers[i].inherit_stdin && foreground);
    int exec_errno = 0;
    const Prepared prepared = prepare(workers[i]);
    pid_t pid = vfork_exec(prepared, self, stdin_fd, out.write.get(), err.write.get(),
                           progress ? progress->write.get() : -1, &exec_errno, own_group);
    if (pid < 0) {
      throw SpawnError("cannot execute '" + workers[i].argv.at(0) +
                       "': " + std::strerror(exec_errno));
    }
    posix::set_nonblocking(out.read.get());
    posix::set_nonblocking(err.read.get());
    started.emplace_back(pid, std::move(out.read), std::move(err.read), own_group);
    if (progress) {
      posix::set_nonblocking(progress->read.get());
      started.back().progress() = std::move(progress->read);
    }
  }
  return started;
}

}  // namespace ddplaunch
