// `ddplaunch store ...`: carries out a StoreCommand against the job's store
// with the public StoreClient, reading values from stdin and writing them to
// stdout byte for byte. The top layer, beside agent/launch.
#pragma once

#include "cli/store_cli.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

// The exit status: 0 done; 1 not found, not swapped or timed out; 3 the store
// cannot be reached or refused the credential. Throws UsageError (2) for a
// value that is not what the subcommand takes.
int run_store_command(const StoreCommand& command, const EnvMap& env);

}  // namespace ddplaunch
