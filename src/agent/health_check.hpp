// The node's health check (--health-check): the user's shell command, run
// before this node joins, with a deadline, its output (stdout and stderr in
// one stream) kept for the report. The launcher's one thread; signals still
// end the wait (the Driver reads them while it waits).
#pragma once

#include <string>
#include <vector>

#include "agent/driver.hpp"
#include "config/config.hpp"
#include "config/env_map.hpp"
#include "node/identity.hpp"
#include "supervise/summary.hpp"

namespace ddplaunch {

// Runs `command` through /bin/sh -c with `env`, stdin /dev/null, in its own
// process group (killed whole at the deadline); waits for it to end. A
// command that cannot start at all is a failed check, not an exception.
HealthCheckResult run_health_check(const std::string& command, const EnvMap& env, double timeout_s,
                                   Driver& driver);

// --health-check as this node runs it: `builtin` is this binary's `check`
// with the job's log directory and the ports this node will bind.
std::string builtin_check_command(const Config& config);

// Runs --health-check (before the node joins, and again before each later
// round); its output is shown as it ends, each line naming the node on
// several nodes: a warning when it failed.
HealthCheckResult run_and_show_health_check(const Config& config, const EnvMap& env,
                                            Driver& driver);

// The check before this node joins. A one-node job that fails it ends here
// (LaunchError, exit 5); on several nodes the join record says why
// (`self.health`).
HealthCheckResult check_health(const Config& config, const EnvMap& env, Driver& driver,
                               NodeIdentity& self);

}  // namespace ddplaunch
