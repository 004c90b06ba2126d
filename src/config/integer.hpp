// The strict integer parser for flags, record fields, environment values and
// /proc or /sys numbers read as text (a few older readers still use
// strtol, atoi or from_chars of their own). The whole text must
// be a base-10 integer (an optional '-', digits, nothing else: no spaces, no
// '+', no "0x") that fits in a long long; anything else is nullopt, so that
// each caller can say which source held the bad value. Pure; no system call.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace ddplaunch {

inline std::optional<long long> parse_integer(std::string_view text) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return value;
}

// parse_integer() within [lo, hi].
inline std::optional<long long> parse_integer_in(std::string_view text, long long lo,
                                                 long long hi) {
  auto v = parse_integer(text);
  if (!v || *v < lo || *v > hi) {
    return std::nullopt;
  }
  return v;
}

}  // namespace ddplaunch
