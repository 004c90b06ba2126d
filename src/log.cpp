#include "log.hpp"

#include <spdlog/sinks/stdout_sinks.h>

namespace ddplaunch::log {

void setup(std::string_view level) {
  // Unbuffered stderr sink: launcher messages and workers' lines never interleave mid-line.
  auto logger = spdlog::stderr_logger_st("ddplaunch");
  logger->set_pattern("ddplaunch: %^%l%$: %v");
  logger->set_level(spdlog::level::from_str(std::string(level)));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace ddplaunch::log
