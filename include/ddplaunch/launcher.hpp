// The whole run: Config → (rendezvous) → Plan → Agent → summary → exit code.
// Called once from main(); errors that end the run are thrown (error.hpp).
#pragma once

#include "ddplaunch/config.hpp"
#include "ddplaunch/env_detect.hpp"
#include "ddplaunch/plan.hpp"

namespace ddplaunch {

// Runs the job described by `config` with the inherited environment `env`
// and returns ddplaunch's exit code.
int run_launcher(const Config& config, const EnvMap& env);

// The --dry-run document: the resolved configuration and every local rank's
// argv and environment, as JSON.
std::string dry_run_json(const Config& config, const Plan& plan);

}  // namespace ddplaunch
