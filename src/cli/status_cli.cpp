#include "cli/status_cli.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "config/options.hpp"

namespace ddplaunch {

namespace {

double seconds_of(const std::string& text, const std::string& flag, double lo) {
  if (const auto s = parse_seconds_in(text, lo, 86400)) {
    return *s;
  }
  throw UsageError(fmt::format("status {} {}: give seconds from {} to 86400", flag, text, lo));
}

// The options both commands take: which job, which ranks, how long.
struct JobOptions {
  std::string port_text;
  std::string timeout_text;
};

void add_job_options(CLI::App& app, StatusCommand& cmd, JobOptions& o) {
  app.add_flag("--json", cmd.json, "Print one JSON document instead of the screen");
  app.add_option("--ranks", cmd.ranks, "Only these ranks: 0-3,8 [all]");
  app.add_option("--nodes", cmd.nodes, "Only these nodes: 0,2 [all]");
  app.add_option("--master-addr,--master_addr,--addr", cmd.addr,
                 "Node 0's address [the job found on this host]");
  app.add_option("--master-port,--master_port,--port", o.port_text, "The job's port [found]");
  app.add_option("--token-file,--rdzv-token-file", cmd.token_file,
                 cmd.stacks
                     ? "File holding the job's token [$DDPLAUNCH_RDZV_TOKEN, else ddplaunch token "
                       "init's file]"
                     : "File holding the job's token [$DDPLAUNCH_RDZV_TOKEN, else a worker's "
                       "credential]");
  app.add_option("--timeout", o.timeout_text,
                 fmt::format("Seconds each node has to answer [{:g}]", cmd.timeout_s));
}

// Parses `args` into `app`; nullopt when they are fine, else --help's text.
std::optional<std::string> parse_into(CLI::App& app, const std::vector<std::string>& args,
                                      const char* name) {
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::CallForHelp&) {
    return app.help();
  } catch (const CLI::ParseError& e) {
    throw UsageError(fmt::format("{}: {}; run 'ddplaunch {} --help'", name, e.what(), name));
  }
  return std::nullopt;
}

void check_job_options(StatusCommand& cmd, const JobOptions& o, const char* name) {
  if (!o.timeout_text.empty()) {
    cmd.timeout_s = seconds_of(o.timeout_text, "--timeout", 0.1);
  }
  if (!o.port_text.empty()) {
    const auto port = parse_integer_in(o.port_text, 1, 65535);
    if (!port) {
      throw UsageError(
          fmt::format("{} --master-port {}: give a port from 1 to 65535", name, o.port_text));
    }
    cmd.port = static_cast<int>(*port);
  }
  if (!cmd.ranks.empty()) {
    parse_rank_list(cmd.ranks, fmt::format("{} --ranks", name));
  }
  if (!cmd.nodes.empty()) {
    parse_rank_list(cmd.nodes, fmt::format("{} --nodes", name));
  }
  if (!cmd.addr.empty() && !cmd.port) {
    throw UsageError(fmt::format("{} --master-addr needs --master-port: the job's port", name));
  }
}

}  // namespace

StatusCommand parse_status_command(const std::vector<std::string>& args) {
  StatusCommand cmd;
  CLI::App app{
      "ddplaunch status: what a running job is doing now, from any of its nodes (or from\n"
      "elsewhere with --master-addr, --master-port and the job's token). Every node answers\n"
      "on request through the job's store; one that does not within --timeout is named.",
      "ddplaunch status"};
  app.footer(
      "Exit status: 0 every node asked answered; 1 some node did not answer in time;\n"
      "2 bad usage, or several jobs run on this host; 3 no job found, the store cannot be\n"
      "reached, or it refused the token.");
  JobOptions o;
  std::string watch_text;
  add_job_options(app, cmd, o);
  app.add_option("--watch", watch_text, "Redraw every S seconds, like top [2]")
      ->expected(0, 1)
      ->default_str("2");
  if (auto help = parse_into(app, args, "status")) {
    cmd.print_and_exit = std::move(help);
    return cmd;
  }
  if (app.count("--watch") > 0) {
    cmd.watch_s = watch_text.empty() ? 2.0 : seconds_of(watch_text, "--watch", 0.1);
  }
  check_job_options(cmd, o, "status");
  return cmd;
}

StatusCommand parse_stacks_command(const std::vector<std::string>& args) {
  StatusCommand cmd;
  cmd.stacks = true;
  cmd.timeout_s = 30;
  CLI::App app{
      "ddplaunch stacks: the stacks of every rank of a running job (or the chosen ones),\n"
      "taken by a debugger on each rank's node while the job goes on: native frames through\n"
      "eu-stack or gdb, Python frames through gdb's py-bt where python3.X-dbg is installed.\n"
      "Needs the job's token when the job has one (the workers' credential may not ask).",
      "ddplaunch stacks"};
  app.footer(
      "Exit status: 0 every node asked answered; 1 some node did not answer in time;\n"
      "2 bad usage, or several jobs run on this host; 3 no job found, the store cannot be\n"
      "reached, or it refused the token.");
  JobOptions o;
  add_job_options(app, cmd, o);
  if (auto help = parse_into(app, args, "stacks")) {
    cmd.print_and_exit = std::move(help);
    return cmd;
  }
  check_job_options(cmd, o, "stacks");
  return cmd;
}

}  // namespace ddplaunch
