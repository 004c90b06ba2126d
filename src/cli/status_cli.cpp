#include "cli/status_cli.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "config/options.hpp"

namespace ddplaunch {

namespace {

double seconds_of(const std::string& text, const std::string& flag, double lo) {
  try {
    size_t used = 0;
    const double s = std::stod(text, &used);
    if (used == text.size() && s >= lo && s <= 86400) {
      return s;
    }
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("status {} {}: give seconds from {} to 86400", flag, text, lo));
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
  std::string watch_text;
  std::string port_text;
  std::string timeout_text;
  app.add_flag("--json", cmd.json, "Print one JSON document instead of the screen");
  app.add_option("--watch", watch_text, "Redraw every S seconds, like top [2]")
      ->expected(0, 1)
      ->default_str("2");
  app.add_option("--ranks", cmd.ranks, "Only these ranks: 0-3,8 [all]");
  app.add_option("--nodes", cmd.nodes, "Only these nodes: 0,2 [all]");
  app.add_option("--master-addr,--master_addr,--addr", cmd.addr,
                 "Node 0's address [the job found on this host]");
  app.add_option("--master-port,--master_port,--port", port_text, "The job's port [found]");
  app.add_option(
      "--token-file,--rdzv-token-file", cmd.token_file,
      "File holding the job's token [$DDPLAUNCH_RDZV_TOKEN, else a worker's credential]");
  app.add_option("--timeout", timeout_text, "Seconds each node has to answer [3]");
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::CallForHelp&) {
    cmd.print_and_exit = app.help();
    return cmd;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string("status: ") + e.what() + "; run 'ddplaunch status --help'");
  }
  if (app.count("--watch") > 0) {
    cmd.watch_s = watch_text.empty() ? 2.0 : seconds_of(watch_text, "--watch", 0.1);
  }
  if (!timeout_text.empty()) {
    cmd.timeout_s = seconds_of(timeout_text, "--timeout", 0.1);
  }
  if (!port_text.empty()) {
    const auto port = parse_integer_in(port_text, 1, 65535);
    if (!port) {
      throw UsageError("status --master-port " + port_text + ": give a port from 1 to 65535");
    }
    cmd.port = static_cast<int>(*port);
  }
  if (!cmd.ranks.empty()) {
    parse_rank_list(cmd.ranks, "status --ranks");
  }
  if (!cmd.nodes.empty()) {
    parse_rank_list(cmd.nodes, "status --nodes");
  }
  if (!cmd.addr.empty() && !cmd.port) {
    throw UsageError("status --master-addr needs --master-port: the job's port");
  }
  return cmd;
}

}  // namespace ddplaunch
