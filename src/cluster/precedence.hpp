// One precedence rule turns the command line and the detectors' findings into
// the Config: a flag wins over a detector, a detector (earlier in the list
// first) over the default written in Config. Each value's source is kept in
// Config::sources, and a bad value's usage error names the variable that held
// it. Pure: the environment comes in as a value.
#pragma once

#include <vector>

#include "cluster/detection.hpp"
#include "cluster/mpi_hostfile.hpp"
#include "config/command_line.hpp"
#include "config/config.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

// Every detector, in precedence order, run over `env` and the node's files.
std::vector<Detection> detect_all(const EnvMap& env, const ClusterFiles& files = {});

// flag > detector > default, then validate(). Throws UsageError.
Config resolve(const CommandLine& command_line, const std::vector<Detection>& detections);

// The whole input pipeline: resolve(command line, detect_all(env, files)).
Config configure(const CommandLine& command_line, const EnvMap& env,
                 const ClusterFiles& files = {});

}  // namespace ddplaunch
