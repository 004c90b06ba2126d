#include "log.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "posix/fd.hpp"

namespace ddplaunch::log {

namespace {

std::atomic<LineOutput*> g_output{nullptr};
std::atomic<bool> g_abandoned{false};

void route(std::string_view line) {
  if (g_abandoned.load()) {
    return;
  }
  if (LineOutput* out = g_output.load()) {
    out->write_line(line);
  } else {
    posix::write_all(2, line);  // one write per line: never torn by the workers' lines
  }
}

// spdlog's formatting, then route(): unbuffered, one line per write.
class RoutedSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    route(std::string_view(formatted.data(), formatted.size()));
  }
  void flush_() override {}
};

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
  // Unbuffered, one write per line: launcher messages and workers' lines never
  // interleave mid-line. Thread-safe: the store server thread warns too.
  auto logger = std::make_shared<spdlog::logger>("ddplaunch", std::make_shared<RoutedSink>());
  logger->set_pattern("ddplaunch: %l: %v");
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

void set_output(LineOutput* output) {
  g_output.store(output);
}

void abandon_console() {
  g_abandoned.store(true);
}

void raw(std::string_view line) {
  route(line);
}

}  // namespace ddplaunch::log
