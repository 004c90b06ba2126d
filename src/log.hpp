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

// Where the launcher's own lines go instead of stderr while one is set (the
// console writer, which must outlive every thread that logs); nullptr: stderr.
class LineOutput {
 public:
  virtual ~LineOutput() = default;
  virtual void write_line(std::string_view line) = 0;
};
void set_output(LineOutput* output);
// The console took nothing for too long: from now on the launcher's lines are
// dropped rather than block its exit on a stderr nobody reads.
void abandon_console();
// A whole line of text (with its newline) for stderr, through the same route
// as the log: how main() reports the error that ends the run.
void raw(std::string_view line);

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
