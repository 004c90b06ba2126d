// The launcher's own messages, on stderr, through spdlog. Private to src/:
// public headers never include spdlog.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace ddplaunch::log {

// Sets the level (trace|debug|info|warn|error|off) and the "ddplaunch: " format.
void setup(std::string_view level);

template <typename... Args>
void debug(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  spdlog::debug(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void info(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  spdlog::info(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  spdlog::warn(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void error(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  spdlog::error(fmt, std::forward<Args>(args)...);
}

}  // namespace ddplaunch::log
