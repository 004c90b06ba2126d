// The command line: turns argv into a Config. The only file that sees CLI11.
// Pure: no system calls. Every bad input throws UsageError with one line
// naming the flag and what it accepts.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ddplaunch/config.hpp"

namespace ddplaunch {

struct CliResult {
  Config config;
  // Set for --help and --version: print this to stdout and exit 0.
  std::optional<std::string> print_and_exit;
};

// Parses `args` (argv without argv[0]).
CliResult parse_command_line(const std::vector<std::string>& args);

// torchrun's -r/--redirects and -t/--tee value: "3" or "0:1,1:2".
StreamSelection parse_stream_selection(std::string_view value, std::string_view flag);

// A comma-separated list of non-negative ranks: "0,3,5".
std::set<int> parse_rank_list(std::string_view value, std::string_view flag);

// Checks a --prefix template: only {rank} {local_rank} {node_rank} {host} {time}.
void validate_prefix_template(std::string_view tmpl);

}  // namespace ddplaunch
