#include "agent/launch_report.hpp"

#include <fmt/format.h>

#include "config/launch_error.hpp"
#include "launcher/agent_channel.hpp"
#include "node/identity.hpp"
#include "output/reports.hpp"
#include "proc/spawn.hpp"

namespace ddplaunch {

namespace {

// A Python rank that could not import a module, run by the `python3` found on
// PATH (a pyenv shim, a venv not activated may put another interpreter
// first): which interpreter that was, and how to choose the right one.
std::string which_python_note(const Config& config, const EnvMap& env, const JobSummary& summary) {
  if (!summary.root_cause || !config.python.empty() || env.contains("PYTHON_EXEC")) {
    return {};
  }
  const RankOutcome& r = *summary.root_cause;
  auto mentions = [](const std::string& text) {
    return text.find("ModuleNotFoundError") != std::string::npos;
  };
  const bool missing_module =
      (r.error && (mentions(r.error->message) || mentions(r.error->traceback))) ||
      std::any_of(r.last_stderr.begin(), r.last_stderr.end(), mentions);
  const auto argv = worker_argv(config, env);
  if (!missing_module || argv.size() < 2 || argv[1] != "-u") {
    return {};
  }
  const auto found = find_program(argv.front(), env);
  std::error_code ec;
  const std::string resolved =
      found ? std::filesystem::canonical(*found, ec).string() : std::string("not found");
  return fmt::format(
      "ddplaunch: the ranks ran {} (the first {} on PATH); if your packages are installed for "
      "another Python, give it with --python /path/to/python\n",
      ec || resolved.empty() ? found.value_or("?") : resolved, argv.front());
}

}  // namespace

int report(const Config& config, const EnvMap& env, const Agent& agent, ConsoleWriter& console,
           const std::optional<HealthCheckResult>& health) {
  JobSummary summary = agent.summary();
  summary.health_check = health;
  if (auto path = summary_path(config.summary_json, agent.node_rank())) {
    const bool shared = agent.node_rank().value_or(0) != 0 && *path == config.summary_json;
    summary.launcher_max_rss_kib = peak_rss_kib();  // /proc/self/status: read only for the file
    write_summary_json(*path, summary, shared, summary.start_time);
  }
  write_inherited_error_file(env, summary);
  if (agent.error()) {
    throw LaunchError(summary.exit_code, *agent.error());
  }
  // Under a launching command (--hosts) node 0's report speaks for the job;
  // another node's says nothing (node 0 names a lost node), and when node 0
  // itself was lost, the command reports that once for every node. When
  // the command stopped the job for its own reason, it says why.
  if (config.launcher_channel && agent.node_0_lost()) {
    announce_node_0_lost(summary.message);
  }
  const bool member = config.node_rank.value_or(agent.node_rank().value_or(0)) != 0;
  const bool quiet =
      (config.launcher_channel && (member || agent.node_0_lost())) || agent.stopped_by_command();
  std::string text = quiet ? std::string() : format_failure_report(summary);
  if (!text.empty()) {
    // Before the last line, which says the exit code.
    const size_t last = text.rfind("ddplaunch: exit code");
    text.insert(last == std::string::npos ? text.size() : last,
                which_python_note(config, env, summary));
    console.write_own(2, text);
  }
  return summary.exit_code;
}

}  // namespace ddplaunch
