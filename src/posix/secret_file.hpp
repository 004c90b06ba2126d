// A secret kept in a file (--rdzv-token-file, `ddplaunch store --token-file`,
// the user's token file): read with the checks a secret needs.
#pragma once

#include <string>

namespace ddplaunch::posix {

inline constexpr size_t k_max_secret_bytes = 4096;

// The file's bytes, without trailing whitespace (a newline). Only a regular
// file of at most k_max_secret_bytes is read: a directory, a device
// (/dev/zero), a FIFO or a larger file is a UsageError naming `what` (the
// option) and what to give instead. A file others may read or write is a
// warning for the caller to show, or with `strict` a UsageError. An empty
// secret is a UsageError.
struct SecretFile {
  std::string secret;
  std::string warning;  // empty: none
};
SecretFile read_secret_file(const std::string& path, const std::string& what, bool strict);

// The user's job token file: $XDG_CONFIG_HOME/ddplaunch/token, else
// $HOME/.config/ddplaunch/token ("" when neither is set).
std::string user_token_path(const std::string& xdg_config_home, const std::string& home);

// Writes a fresh random secret (32 bytes, hex) to `path` with mode 0600,
// creating its directory (0700). An existing file is kept unless `replace`.
// Throws UsageError (it exists) or std::system_error.
void create_secret_file(const std::string& path, bool replace);

}  // namespace ddplaunch::posix
