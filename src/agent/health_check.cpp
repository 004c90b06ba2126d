#include "agent/health_check.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <memory>

#include "log.hpp"
#include "posix/fd.hpp"
#include "proc/spawn.hpp"
#include "supervise/exit_info.hpp"

namespace ddplaunch {

namespace {

// What the check printed, whole lines, the last k_health_check_lines kept.
class LastLines {
 public:
  void add(std::string_view data) {
    for (char c : data) {
      if (c == '\n') {
        end_line();
      } else if (m_partial.size() < k_max_line) {
        m_partial += c;
      }
    }
  }
  std::vector<std::string> take() {
    end_line();
    return {m_lines.begin(), m_lines.end()};
  }

 private:
  static constexpr size_t k_max_line = 4096;
  void end_line() {
    while (!m_partial.empty() && (m_partial.back() == '\r' || m_partial.back() == ' ')) {
      m_partial.pop_back();
    }
    if (!m_partial.empty()) {
      m_lines.push_back(std::move(m_partial));
      if (m_lines.size() > k_health_check_lines) {
        m_lines.pop_front();
      }
    }
    m_partial.clear();
  }
  std::deque<std::string> m_lines;
  std::string m_partial;
};

// Whether the process behind `pidfd` has ended (readable: it has).
bool has_ended(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

std::string seconds_text(double s) {
  return fmt::format("{:g} s", s);
}

}  // namespace

HealthCheckResult run_health_check(const std::string& command, const EnvMap& env, double timeout_s,
                                   Driver& driver) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(timeout_s));
  HealthCheckResult result;
  result.command = command;
  auto finish = [&](bool ok, std::string status) {
    result.ok = ok;
    result.status = std::move(status);
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  };
  WorkerSpec spec;
  // stderr joins stdout before the command is even parsed: a syntax error is
  // output too. The command is $1, never spliced into the script.
  spec.argv = {"/bin/sh", "-c", "exec 2>&1\neval \"$1\"", "ddplaunch-health-check", command};
  spec.env = WorkerEnv(std::make_shared<const EnvMap>(env), env);
  std::vector<Child> started;
  try {
    started = spawn_workers({spec});
  } catch (const LaunchError& e) {
    result.output = {e.what()};
    return finish(false, "could not start");
  }
  Child& child = started.front();
  LastLines lines;
  // Its output and its end, watched together through one epoll fd (itself
  // readable): a command that leaves a background process holding its
  // output has still ended when the shell has.
  const posix::Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child.pid(), 0)));
  const posix::Fd both(::epoll_create1(EPOLL_CLOEXEC));
  for (int fd : {child.out().get(), pidfd.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (fd >= 0 && both) {
      ::epoll_ctl(both.get(), EPOLL_CTL_ADD, fd, &ev);
    }
  }
  auto drain = [&] {
    char buf[4096];
    while (child.out()) {
      const ssize_t n = ::read(child.out().get(), buf, sizeof buf);
      if (n > 0) {
        lines.add(std::string_view(buf, static_cast<size_t>(n)));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        return n == 0;  // true: the output ended
      }
    }
    return true;
  };
  bool timed_out = false;
  bool watching_output = true;
  while (true) {
    const bool output_ended = drain();
    // Without a pidfd (before Linux 5.3) its output's end stands for its end.
    if (pidfd ? has_ended(pidfd.get()) : output_ended) {
      break;
    }
    if (output_ended && watching_output && both) {
      ::epoll_ctl(both.get(), EPOLL_CTL_DEL, child.out().get(), nullptr);  // at EOF for good
      watching_output = false;
    }
    const int watch = both ? both.get() : child.out().get();
    if (!driver.wait_readable(watch, deadline, "running the health check")) {
      timed_out = true;
      break;
    }
  }
  drain();
  // Whatever it left behind in its process group goes with it.
  child.signal(SIGKILL);
  int status = 0;
  while (::waitpid(child.pid(), &status, 0) < 0 && errno == EINTR) {
  }
  child.mark_reaped();
  result.output = lines.take();
  if (timed_out) {
    return finish(false, "timed out after " + seconds_text(timeout_s));
  }
  const ExitInfo info = ExitInfo::from_wait_status(status);
  return finish(info.success(), info.success() ? "passed" : "failed with " + info.describe());
}

}  // namespace ddplaunch
