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
// warning, or with `strict` a UsageError. An empty secret is a UsageError.
std::string read_secret_file(const std::string& path, const std::string& what, bool strict);

}  // namespace ddplaunch::posix
