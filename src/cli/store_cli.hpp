// `ddplaunch store SUBCOMMAND ...`: the job's store from the shell. This file
// turns its argv into a StoreCommand (CLI11, as the launch's command line);
// tool/store_tool.cpp carries it out. Pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddplaunch {

struct StoreCommand {
  // set, get, wait, add, cas, delete, check, keys, num-keys
  std::string op;
  std::vector<std::string> args;  // the keys and values, as given
  bool value_from_stdin = false;  // set KEY (or set KEY -): the value is stdin's bytes
  double timeout_s = 300;         // get and wait; 0: no limit. Default: 300 (TCPStore's)
  std::string addr;               // Default: empty = $DDPLAUNCH_STORE_ADDR
  std::optional<int> port;        // Default: $DDPLAUNCH_STORE_PORT
  std::string token_file;         // Default: empty = $DDPLAUNCH_STORE_TOKEN
  bool strict_token = false;      // refuse a token file others may read. Default: false
  // Keys live under this prefix. Default: $DDPLAUNCH_STORE_PREFIX, else "user/"
  // with --addr (a store named by hand is the job's as well).
  std::optional<std::string> prefix;
  std::optional<std::string> print_and_exit;  // --help
};

// Parses `args` (what follows "store"). Throws UsageError.
StoreCommand parse_store_command(const std::vector<std::string>& args);

}  // namespace ddplaunch
