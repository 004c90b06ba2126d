#include "agent/health_check.hpp"

#include <csignal>
#include <memory>
#include <optional>
#include <string_view>

#include "config/launch_error.hpp"
#include "launcher/plan.hpp"
#include "log.hpp"
#include "node/resources.hpp"
#include "output/lines.hpp"
#include "proc/spawn.hpp"
#include "supervise/exit_info.hpp"

namespace ddplaunch {

namespace {

// How long a check killed at its timeout may take to end.
constexpr auto k_kill_wait = std::chrono::seconds(5);

std::string seconds_text(double s) {
  return fmt::format("{:g} s", s);
}

// What the check printed: whole lines (a \r update is overwritten by what
// follows), trailing blanks off, empty ones left out, the last
// k_health_check_lines kept.
class CheckOutput {
 public:
  void feed(std::string_view data) {
    m_lines.feed(data, [this](std::string_view line, LineEnd end) { keep(line, end); });
  }
  std::vector<std::string> take() {
    m_lines.finish([this](std::string_view line, LineEnd end) { keep(line, end); });
    if (!m_update.empty()) {
      keep(std::string(m_update), LineEnd::k_piece);  // a last update, never ended
    }
    return m_tail.lines();
  }

 private:
  static constexpr size_t k_max_line = 4096;
  void keep(std::string_view line, LineEnd end) {
    if (end == LineEnd::k_return) {
      m_update.assign(line);  // shown until what follows it overwrites it
      return;
    }
    if (line.empty() && end == LineEnd::k_bare_newline) {
      line = m_update;  // "\r\n" across two reads: the line before the '\r'
    }
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
      line.remove_suffix(1);
    }
    if (!line.empty()) {
      m_tail.push(line);
    }
    m_update.clear();
  }
  LineSplitter m_lines;
  TailBuffer m_tail{k_health_check_lines, k_max_line};
  std::string m_update;  // the last \r update of the line being drawn
};

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
  CheckOutput output;
  const auto feed = [&output](std::string_view data) { output.feed(data); };
  constexpr const char* k_doing = "running the health check";
  std::optional<ExitInfo> ended = driver.wait_child(child, feed, deadline, k_doing);
  // Whatever it left behind in its process group goes with it (once timed
  // out, itself too; its end is then taken as it comes).
  child.signal(SIGKILL);
  const bool timed_out = !ended;
  if (timed_out) {
    ended = driver.wait_child(child, feed, std::chrono::steady_clock::now() + k_kill_wait, k_doing);
  }
  if (ended) {
    child.mark_reaped();
  }
  result.output = output.take();
  if (timed_out) {
    return finish(false, "timed out after " + seconds_text(timeout_s));
  }
  return finish(ended->success(), ended->success() ? "passed" : "failed with " + ended->describe());
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
