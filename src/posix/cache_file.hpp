// A file a launch leaves for the next one (ccache's habit: a slow answer is
// kept, keyed by everything it depends on): one header line that names what
// it was written for, then the body. Used by the topology cache and the PMIx
// environment cache (mpi/).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ddplaunch::posix {

// The body of `path` when the file is this user's own regular file, not
// writable by others, no larger than `max_bytes`, and its first line is
// `header`; nullopt otherwise (missing, stale, foreign, unreadable).
std::optional<std::string> read_cache_file(const std::string& path, std::string_view header,
                                           size_t max_bytes);

// Replaces `path` with `header`, a newline and `body` (a private temporary
// file renamed over it: a reader sees the old file or the new one, never
// half). False when it cannot (a full disk, another user's file in the way).
bool write_cache_file(const std::string& path, std::string_view header, std::string_view body);

}  // namespace ddplaunch::posix
