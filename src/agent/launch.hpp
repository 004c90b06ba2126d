// The real run: wires the Agent to the real spawner, clock, store link and
// console, and drives it from one epoll loop that owns the run from the first
// instruction to exit: the signals (a signalfd, set up before anything else),
// the workers' pipes and exits, the store connections and every timer.
// The loop is the Driver's (agent/driver.hpp). Called once from main();
// errors that end the run are thrown (config/launch_error.hpp).
#pragma once

#include "config/config.hpp"
#include "config/env_map.hpp"
#include "launcher/agent_channel.hpp"

namespace ddplaunch {

// Runs the job `config` describes, with the inherited environment `env`, and
// returns ddplaunch's exit code. --dry-run prints the plan instead.
// `channel`: the launcher channel of the command that started this agent
// (--launcher-channel), watched from the start of the run; nullptr: none.
int run_launch(const Config& config, const EnvMap& env, AgentChannel* channel = nullptr);

}  // namespace ddplaunch
