// The node's health check (--health-check): the user's shell command, run
// before this node joins, with a deadline, its output (stdout and stderr in
// one stream) kept for the report. The launcher's one thread; signals still
// end the wait (the Driver reads them while it waits).
#pragma once

#include <string>
#include <vector>

#include "agent/driver.hpp"
#include "config/env_map.hpp"
#include "supervise/summary.hpp"

namespace ddplaunch {

// Runs `command` through /bin/sh -c with `env`, stdin /dev/null, in its own
// process group (killed whole at the deadline); waits for it to end. A
// command that cannot start at all is a failed check, not an exception.
HealthCheckResult run_health_check(const std::string& command, const EnvMap& env, double timeout_s,
                                   Driver& driver);

}  // namespace ddplaunch
