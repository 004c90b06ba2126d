// Which of the launching command's environment reaches the agents it starts
// and their workers. ssh gives a remote command the login environment, not
// this one, so ddplaunch carries a chosen part of it over the launcher
// channel: variables matching the default patterns (what torchrun users
// export before a job: NCCL_*, PYTHONPATH, PATH, ...), those matching
// --env-forward patterns, and those -x names (mpirun's spelling; -x VAR=value
// sets a value). Pure.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/env_map.hpp"

namespace ddplaunch {

// The default patterns, in the order docs/HOSTS.md lists them.
std::span<const std::string_view> default_forward_patterns();

// Variables never forwarded by a pattern (only by -x): this host's own
// identity and session (HOSTNAME, SSH_*, DISPLAY, ...), the job token,
// and what ddplaunch sets for each worker itself.
bool never_forwarded(std::string_view name);

// A shell glob with only '*' (any run of characters): "NCCL_*", "*_HOME".
bool glob_match(std::string_view pattern, std::string_view name);

// What to send, sorted by name. `exports`: -x items ("VAR": this
// environment's value, if set; "VAR=value"); `patterns`: --env-forward's
// ("none" drops the defaults).
std::vector<std::pair<std::string, std::string>> forwarded_environment(
    const EnvMap& env, const std::vector<std::string>& exports,
    const std::vector<std::string>& patterns);

}  // namespace ddplaunch
