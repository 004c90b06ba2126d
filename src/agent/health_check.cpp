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

#include "config/launch_error.hpp"
#include "launcher/plan.hpp"
#include "log.hpp"
#include "node/resources.hpp"
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

// Reads what the check's output holds now into LINES; true once it ended.
bool drain_output(Child& child, LastLines& lines) {
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
}

// Its output and its end, watched together through one epoll fd (itself
// readable) in the Driver's wait: a command that leaves a background
// process holding its output has still ended when the shell has. False
// when DEADLINE came first.
bool watch_check(Child& child, LastLines& lines, std::chrono::steady_clock::time_point deadline,
                 Driver& driver) {
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
  bool ended = true;
  bool watching_output = true;
  while (true) {
    const bool output_ended = drain_output(child, lines);
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
      ended = false;
      break;
    }
  }
  drain_output(child, lines);
  return ended;
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
  const bool timed_out = !watch_check(child, lines, deadline, driver);
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

// `--health-check builtin`: this binary's `check`, with the job's log
// directory and the ports this node will bind (its --worker-port; node 0's
// --master-port when --node-rank 0 is given). Any other command as given.
std::string builtin_check_command(const Config& config) {
  if (config.health_check != "builtin") {
    return config.health_check;
  }
  std::string command = shell_quote(posix::self_exe().value_or("ddplaunch")) + " check";
  if (!config.log_dir.empty()) {
    command += " --dir " + shell_quote(config.log_dir);
  }
  if (config.worker_port) {
    command += " --port " + std::to_string(*config.worker_port);
  }
  if (config.nnodes > 1 && config.node_rank == 0) {
    command += " --port " + std::to_string(config.master_port);
  }
  return command;
}

// Runs --health-check (before the node joins, and again before each later
// round); its output is shown as it ends: a warning when it failed.
HealthCheckResult run_and_show_health_check(const Config& config, const EnvMap& env,
                                            Driver& driver) {
  HealthCheckResult result =
      run_health_check(builtin_check_command(config), env, config.health_check_timeout_s, driver);
  result.command = config.health_check;
  if (result.ok) {
    log::debug("health check '{}' passed in {:.3f} s", result.command, result.seconds);
  }
  // On several nodes each line names its node (a launching command shows
  // every node's lines together).
  const std::string where =
      config.nnodes > 1 && config.node_rank
          ? fmt::format(" on node {} ({})", *config.node_rank, local_hostname())
          : std::string();
  for (const auto& line : result.output) {
    if (result.ok) {
      log::debug("health check{}: {}", where, line);
    } else {
      log::warn("health check{}: {}", where, line);
    }
  }
  return result;
}

// The check before this node joins. A one-node job that fails it ends here
// (exit 5); on several nodes the join record says why.
HealthCheckResult check_health(const Config& config, const EnvMap& env, Driver& driver,
                               NodeIdentity& self) {
  HealthCheckResult result = run_and_show_health_check(config, env, driver);
  if (result.ok) {
    return result;
  }
  self.health = result.describe();
  if (config.nnodes == 1) {
    throw LaunchError(k_exit_unhealthy,
                      "this node failed its health check: " + self.health +
                          "; fix the node (or the check) and start the job again");
  }
  // Under a launching command node 0's error names this node and the
  // check's last line for the job (once, with every node's lines together).
  if (config.launcher_channel) {
    log::debug("this node failed its health check: {}; it does not join the job", self.health);
  } else {
    log::error("this node failed its health check: {}; it does not join the job", self.health);
  }
  return result;
}

}  // namespace ddplaunch
