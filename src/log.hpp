// The launcher's own messages, on stderr, through spdlog. Private to src/:
// public headers never include spdlog, and only log.cpp does, so the
// header-only build of spdlog is compiled once.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace ddplaunch::log {

enum class Level { debug, info, warn, error };

// Sets the level (trace|debug|info|warn|error|off) and the "ddplaunch: " format.
void setup(std::string_view level);

bool enabled(Level level);
void write(Level level, std::string_view message);

template <typename... Args>
void emit(Level level, fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(level)) {
    write(level, fmt::format(format, std::forward<Args>(args)...));
  }
}

template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  emit(Level::debug, format, std::forward<Args>(args)...);
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  emit(Level::info, format, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  emit(Level::warn, format, std::forward<Args>(args)...);
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  emit(Level::error, format, std::forward<Args>(args)...);
}

}  // namespace ddplaunch::log
