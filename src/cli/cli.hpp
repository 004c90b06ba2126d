// The command line: argv -> the options given on it, and the program to run.
// It, cli/store_cli.cpp and cli/status_cli.cpp are the only files that see
// CLI11. mpirun's
// spellings (-np, -npernode, --mca K V) are read as its users type them. It
// reads nothing but its argument (no environment: the detectors in cluster/
// do that), and throws UsageError with one line naming the flag and what it
// accepts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/command_line.hpp"
#include "config/options.hpp"

namespace ddplaunch {

// Parses `args` (argv without argv[0]). Options are checked for shape only
// here; their values are parsed when the Config is built (cluster/precedence).
CommandLine parse_command_line(const std::vector<std::string>& args);

// The option name nearest to a mistyped `given` ("--nproc-per-nod" ->
// "--nproc-per-node"), if one is near enough to be meant.
std::optional<std::string> closest_option(const std::string& given);

}  // namespace ddplaunch
