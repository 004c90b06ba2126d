// `ddplaunch status`: asks every node of a running job what it is doing
// (rendezvous/status_responder.hpp's keys), waits up to the command's
// timeout for their answers, and prints one screen, or one JSON document
// (docs/STATUS.md). The job is the one named by --master-addr/--master-port,
// else the one this process runs in (a worker's DDPLAUNCH_STORE_*), else the
// one job of this user found on this host (its workers' environment).
#pragma once

#include "cli/status_cli.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

// The exit code: 0, 1 (a node did not answer), 3 (no job, no store). Throws
// UsageError (exit 2).
int run_status_command(const StatusCommand& command, const EnvMap& env);

}  // namespace ddplaunch
