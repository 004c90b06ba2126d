#include "log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace ddplaunch::log {

namespace {

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::debug:
      return spdlog::level::debug;
    case Level::info:
      return spdlog::level::info;
    case Level::warn:
      return spdlog::level::warn;
    case Level::error:
      return spdlog::level::err;
  }
  return spdlog::level::err;
}

}  // namespace

void setup(std::string_view level) {
  // Unbuffered stderr sink: launcher messages and workers' lines never interleave mid-line.
  // Thread-safe: the store server thread warns too.
  auto logger = spdlog::stderr_logger_mt("ddplaunch");
  logger->set_pattern("ddplaunch: %^%l%$: %v");
  logger->set_level(spdlog::level::from_str(std::string(level)));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

bool enabled(Level level) {
  return spdlog::default_logger_raw()->should_log(to_spdlog(level));
}

void write(Level level, std::string_view message) {
  spdlog::default_logger_raw()->log(to_spdlog(level), message);
}

}  // namespace ddplaunch::log
