// EnvMap: a process environment as a plain value, ordered by name so output
// is deterministic. Pure: capture_environment only copies the array it gets.
#pragma once

#include <map>
#include <string>

namespace ddplaunch {

using EnvMap = std::map<std::string, std::string>;

// Copies a NULL-terminated "NAME=value" array (such as environ).
EnvMap capture_environment(char** envp);

}  // namespace ddplaunch
