// CommandLine: what the command line gave, as a plain value: the options
// given (each a Setting whose source is "flag") and the program to run.
// cli/cli.hpp fills it; cluster/precedence resolves it with the detectors'
// values. Pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/options.hpp"

namespace ddplaunch {

struct CommandLine {
  Settings flags;                    // every option given, each with source "flag"
  std::vector<std::string> command;  // the program and its arguments
  // Set for --help and --version: print this to stdout and exit 0.
  std::optional<std::string> print_and_exit;
};

}  // namespace ddplaunch
