// `ddplaunch status ...`: what a running job is doing now, and `ddplaunch
// stacks ...`: its ranks' stacks now. This file turns their argv into a
// StatusCommand (CLI11, as the launch's command line); tool/status_tool.cpp
// carries it out. Pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddplaunch {

struct StatusCommand {
  bool stacks = false;            // `ddplaunch stacks`: the ranks' stacks, not their status
  bool json = false;              // one JSON document instead of the screen
  std::optional<double> watch_s;  // --watch [S]: redraw every S seconds. Default: once
  std::string ranks;              // --ranks 0-3,8: only these ranks. Default: all
  std::string nodes;              // --nodes 0,2: only these nodes. Default: all
  std::string addr;               // --master-addr. Default: found on this host
  std::optional<int> port;        // --master-port. Default: found on this host
  std::string token_file;         // the job's token. Default: $DDPLAUNCH_RDZV_TOKEN, a worker's
  double timeout_s = 3;           // how long nodes have to answer. Default: 3 (stacks: 30)
  std::optional<std::string> print_and_exit;  // --help

  // The command's name as typed: "status" or "stacks".
  const char* name() const { return stacks ? "stacks" : "status"; }
};

// Parses `args` (what follows "status"). Throws UsageError.
StatusCommand parse_status_command(const std::vector<std::string>& args);
// Parses what follows "stacks". Throws UsageError.
StatusCommand parse_stacks_command(const std::vector<std::string>& args);

}  // namespace ddplaunch
