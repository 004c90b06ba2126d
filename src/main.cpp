// ddplaunch: the edge. Reads the command line and the environment, runs the
// launch, and turns any error that ends the run into one line on stderr and
// an exit code.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "agent/launch.hpp"
#include "cli/cli.hpp"
#include "cli/completion.hpp"
#include "cli/store_cli.hpp"
#include "cluster/precedence.hpp"
#include "config/env_map.hpp"
#include "config/launch_error.hpp"
#include "launcher/agent_channel.hpp"
#include "launcher/launch_hosts.hpp"
#include "log.hpp"
#include "node/cluster_files.hpp"
#include "tool/check_tool.hpp"
#include "tool/status_tool.hpp"
#include "tool/store_tool.hpp"
#include "tool/token_tool.hpp"

#if defined(__SANITIZE_ADDRESS__)
// LeakSanitizer: libpmix (dlopen()ed: the workers' PMIx server, and the
// exchange under mpirun) and the libraries it loads keep allocations that
// PMIx_Finalize does not free; they are theirs, not ours. Their strings come
// from vasprintf, whose caller the fast unwinder cannot see through libpmix
// (no frame pointers); ddplaunch itself never calls it.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libpmix.so\nleak:libhwloc.so\nleak:libevent\nleak:__vasprintf_internal\n";
}
// A suppressed leak must not add lines to the launcher's stderr.
extern "C" const char* __lsan_default_options() {
  return "print_suppressions=0";
}
#endif

#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer: libpmix's threads race among themselves (its listener
// thread closes a pipe PMIx_server_finalize writes to), and the libraries
// its start loads (hwloc, and libudev under it) open and close files while
// the main thread's sockets come and go, which TSan's fd model calls a race
// on the reused number. Theirs, not ours: ours with libpmix go through our
// mutex and eventfd.
extern "C" const char* __tsan_default_suppressions() {
  return "race:libpmix.so\nrace:libevent\nrace:libhwloc.so\nrace:libudev.so\n"
         "race:libpciaccess.so\nrace:libxml2.so\n";
}
#endif

namespace {
// How long an agent waits for its launching command's header on stdin.
constexpr int k_channel_timeout_ms = 60'000;

// The end of a launch: the job is over and all it printed is written (the
// console finished inside run_launch; the log's sink writes synchronously).
// What exit() would still run (the static destructors of iostream, spdlog's
// registry and CLI11's validators, each page faulted in for the purpose)
// writes nothing and cost every launch about 0.1 ms, so the process leaves
// without it. Sanitizer builds return, so that LeakSanitizer still checks.
int leave(int exit_code) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return exit_code;
#else
  std::fflush(nullptr);
  std::_Exit(exit_code);
#endif
}
// ddplaunch's other commands (--completion, check, token, store): the exit
// code of the one argv names, or nullopt for a launch.
std::optional<int> run_subcommand(int argc, char** argv, const ddplaunch::EnvMap& env) {
  using namespace ddplaunch;
  const std::string first = argc > 1 ? argv[1] : "";
  const std::vector<std::string> rest(argv + std::min(argc, 2), argv + argc);
  if (first == "--completion") {
    const auto script = completion_script(argc > 2 ? argv[2] : "");
    if (!script || argc > 3) {
      throw UsageError("--completion takes bash or zsh");
    }
    std::fputs(script->c_str(), stdout);
    return k_exit_ok;
  }
  if (first == "check") {
    return run_check_command(rest, env);
  }
  if (first == "token") {
    return run_token_command(rest, env);
  }
  if (first == "status" || first == "stacks") {
    const StatusCommand command =
        first == "status" ? parse_status_command(rest) : parse_stacks_command(rest);
    if (command.print_and_exit) {
      std::fputs(command.print_and_exit->c_str(), stdout);
      return k_exit_ok;
    }
    return run_status_command(command, env);
  }
  if (first == "store") {
    const StoreCommand command = parse_store_command(rest);
    if (command.print_and_exit) {
      std::fputs(command.print_and_exit->c_str(), stdout);
      return k_exit_ok;
    }
    return run_store_command(command, env);
  }
  return std::nullopt;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace ddplaunch;
  try {
    const EnvMap env = capture_environment(environ);
    if (const std::optional<int> done = run_subcommand(argc, argv, env)) {
      return *done;
    }
    const CommandLine command_line = parse_command_line({argv + 1, argv + argc});
    if (command_line.print_and_exit) {
      std::fputs(command_line.print_and_exit->c_str(), stdout);
      return k_exit_ok;
    }
    // An agent (or a subtree's root) started by a launching command: the job
    // token and the forwarded environment come on stdin, never in argv.
    std::optional<AgentChannel> channel;
    EnvMap job_env = env;
    if (command_line.flags.contains("launcher_channel")) {
      channel = open_agent_channel(k_channel_timeout_ms);
      for (const auto& [name, value] : channel->header.env) {
        job_env[name] = value;
      }
      if (!channel->header.token.empty()) {
        job_env["DDPLAUNCH_RDZV_TOKEN"] = channel->header.token;
      }
    }
    CommandLine given = command_line;
    if (channel && channel->header.store_port > 0) {
      // Node 0's store port, which its agent picked (--pick-store-port).
      given.flags["master_port"] = Setting{std::to_string(channel->header.store_port), "flag"};
    }
    const Config config = configure(given, job_env, read_cluster_files(job_env));
    // Under a launching command, node 0 says what every node would: the
    // others keep to warnings unless --log-level says otherwise.
    const bool echo = channel && config.node_rank.value_or(0) != 0 && !config.starts_agents() &&
                      config.source_of("log_level") != "flag";
    log::setup(echo ? "warn" : config.log_level);
    if (config.slurm_nodes > 1 && config.hosts.empty() && config.hostfile.empty()) {
      exec_srun_launch(config, job_env, {argv + 1, argv + argc});
    }
    if (config.starts_agents()) {
      return run_hosts_launch(config, command_line, job_env, channel ? &*channel : nullptr);
    }
    if (!config.wdir.empty() && ::chdir(config.wdir.c_str()) != 0) {
      throw UsageError("-wdir " + config.wdir + ": cannot enter it (" + std::strerror(errno) +
                       "); give a directory that exists on this host");
    }
    // mpirun's -x VAR=value (and --mca K V) reaches this node's workers too.
    apply_env_exports(config.env_export, job_env);
    if (channel) {
      announce_ready(config.node_rank.value_or(0));
    }
    return leave(run_launch(config, job_env, channel ? &*channel : nullptr));
  } catch (const LaunchError& e) {
    log::raw(fmt::format("ddplaunch: error: {}\n", e.what()));
    return e.exit_code();
  } catch (const std::system_error& e) {
    log::raw(fmt::format("ddplaunch: error: {}\n", e.what()));
    return k_exit_internal;
  } catch (const std::exception& e) {
    log::raw(fmt::format("ddplaunch: internal error: {}\n", e.what()));
    return k_exit_internal;
  }
}
