// `ddplaunch check`: this node's built-in health checks (node/health.hpp),
// one line each, for a shell, a Slurm HealthCheckProgram, or
// `--health-check builtin`.
//   ddplaunch check [disk] [gpu] [strays] [--dir DIR]... [--port PORT]...
#pragma once

#include <string>
#include <vector>

#include "config/env_map.hpp"

namespace ddplaunch {

// Runs the checks named (all three when none is); prints one line each on
// stdout, failures last. Returns 0 when none failed (skipped is not failed),
// k_exit_unhealthy when one did. Throws UsageError for bad arguments.
int run_check_command(const std::vector<std::string>& args, const EnvMap& env);

}  // namespace ddplaunch
