// The reports a finished run leaves on this node: the
// --summary-json file, an inherited TORCHELASTIC_ERROR_FILE, and the failure
// report on stderr, with a note on which Python ran where a rank could not
// import a module. Under a launching command, node 0's report speaks for the
// job, and a node whose job ended because node 0 was lost says so on its
// channel instead. Called once, after the last round.
#pragma once

#include <optional>

#include "agent/agent.hpp"
#include "agent/health_check.hpp"
#include "config/config.hpp"
#include "config/env_map.hpp"
#include "output/console.hpp"

namespace ddplaunch {

// Returns the job's exit code; an internal error is thrown as the
// LaunchError it is.
int report(const Config& config, const EnvMap& env, const Agent& agent, ConsoleWriter& console,
           const std::optional<HealthCheckResult>& health);

}  // namespace ddplaunch
