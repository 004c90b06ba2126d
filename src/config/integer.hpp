// The integer parsers for every number that comes from outside: flags,
// record fields, environment values, store values, and /proc or /sys
// numbers read as text. parse_integer() is strict: the whole text must be a
// base-10 integer (an optional '-', digits, nothing else: no spaces, no
// '+', no "0x") that fits in a long long; anything else is nullopt, so that
// each caller can say which source held the bad value. parse_hex() is the
// same in base 16; leading_integer() reads the number a /proc field starts
// with. parse_seconds_in() is the one parser of a number of seconds (every
// flag that takes one). format_ranges() writes a sorted list of numbers as
// "0,2-7,9" (CPU lists, rank lists). Pure; no system call.
#pragma once

#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// The base-16 form of parse_integer(), unsigned and 64 bits wide: hex
// digits only (/proc/net/tcp's ports, /proc/PID/status' signal masks).
inline std::optional<unsigned long long> parse_hex(std::string_view text) {
  unsigned long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value, 16);
  if (text.empty() || text.front() == '-' || ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return value;
}

// A number of seconds within [lo, hi]: a decimal number ("1.5", "30", "1e3"),
// all of `text`, finite; nullopt for anything else (no spaces, no unit).
inline std::optional<double> parse_seconds_in(std::string_view text, double lo, double hi) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value) || value < lo ||
      value > hi) {
    return std::nullopt;
  }
  return value;
}

// The non-negative integer `text` starts with, after blanks (spaces, tabs),
// up to the first character that is not a digit: "  1234 kB" in
// /proc/self/status, "32768\t60999" in ip_local_port_range. nullopt when no
// digit comes first or it does not fit.
inline std::optional<long long> leading_integer(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) {
    return std::nullopt;
  }
  text.remove_prefix(begin);
  const size_t digits = text.find_first_not_of("0123456789");
  return parse_integer(text.substr(0, digits == 0 ? 0 : digits));
}

// `sorted` (ascending) as "0,2-7,9".
inline std::string format_ranges(const std::vector<int>& sorted) {
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) {
      ++j;
    }
    out += (out.empty() ? "" : ",") + std::to_string(sorted[i]);
    if (j > i) {
      out += "-" + std::to_string(sorted[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace ddplaunch
