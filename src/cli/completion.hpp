// Shell completion scripts for bash and zsh, built from the option table and
// the store's subcommands, so they cannot drift from --help. `ddplaunch
// --completion bash|zsh` prints one; the build installs both. Pure.
#pragma once

#include <optional>
#include <string>

namespace ddplaunch {

// The script for `shell` ("bash" or "zsh"); nullopt for another shell.
std::optional<std::string> completion_script(const std::string& shell);

}  // namespace ddplaunch
