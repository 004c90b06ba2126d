// `ddplaunch token`: the user's job token file, which every multi-node job
// uses when no other token is given (docs/SECURITY.md).
//   ddplaunch token init [--force]   create it (mode 0600), or replace it
//   ddplaunch token path             print where it is
#pragma once

#include <string>
#include <vector>

#include "config/env_map.hpp"

namespace ddplaunch {

// Carries out `ddplaunch token ARGS`; returns the exit code. Throws
// UsageError for bad arguments or an existing file without --force.
int run_token_command(const std::vector<std::string>& args, const EnvMap& env);

}  // namespace ddplaunch
