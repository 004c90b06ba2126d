#include "output/event_log.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "config/launch_error.hpp"
#include "log.hpp"
#include "output/json_fields.hpp"
#include "output/router.hpp"

namespace ddplaunch {

namespace {

constexpr std::string_view k_node_field = "{node_rank}";

}  // namespace

void EventFields::key(std::string_view key) {
  m_encoded += ',';
  m_encoded += json_text(nlohmann::json(key));
  m_encoded += ':';
}

EventFields& EventFields::num(std::string_view k, long long value) {
  key(k);
  m_encoded += std::to_string(value);
  return *this;
}

EventFields& EventFields::real(std::string_view k, double value) {
  key(k);
  m_encoded += std::isfinite(value) ? fmt::format("{:.3f}", value) : std::string("null");
  return *this;
}

EventFields& EventFields::text(std::string_view k, std::string_view value) {
  key(k);
  m_encoded += json_text(nlohmann::json(value));
  return *this;
}

EventFields& EventFields::flag(std::string_view k, bool value) {
  key(k);
  m_encoded += value ? "true" : "false";
  return *this;
}

EventFields& EventFields::null(std::string_view k) {
  key(k);
  m_encoded += "null";
  return *this;
}

EventFields& EventFields::text_or_null(std::string_view k,
                                       const std::optional<std::string>& value) {
  return value ? text(k, *value) : null(k);
}

EventFields& EventFields::num_or_null(std::string_view k, std::optional<long long> value) {
  return value ? num(k, *value) : null(k);
}

std::string event_log_path(const std::string& path, int node_rank) {
  std::string out = path;
  const std::string rank = std::to_string(node_rank);
  for (size_t at; (at = out.find(k_node_field)) != std::string::npos;) {
    out.replace(at, k_node_field.size(), rank);
  }
  return out;
}

EventLog::EventLog(const std::string& path, ConsoleSink& console, std::string host)
    : m_path(path), m_console(console), m_host(std::move(host)) {
  if (m_path.empty()) {
    m_open = true;  // memory only
  } else if (m_path != "-" && m_path.find(k_node_field) == std::string::npos) {
    open();
  }
}

EventLog::~EventLog() {
  if (!m_held.empty()) {
    // The node never learned its rank (it did not join): its lines go
    // where node 0's would.
    m_node_rank = m_node_rank.value_or(0);
    try {
      open();
      for (const auto& line : m_held) {
        write_line(line);
      }
    } catch (const std::exception& e) {
      log::warn("{}", e.what());
    }
  }
}

void EventLog::open() {
  if (m_path == "-" || m_open) {
    m_open = true;
    return;
  }
  const std::string path = event_log_path(m_path, m_node_rank.value_or(0));
  m_fd = posix::Fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!m_fd) {
    throw UsageError("--event-log " + path + ": cannot write it (" + std::strerror(errno) +
                     "); check the directory exists and is writable");
  }
  m_open = true;
}

void EventLog::set_node_rank(int node_rank) {
  if (m_node_rank == node_rank) {
    return;
  }
  m_node_rank = node_rank;
  if (!m_open) {
    try {
      open();
    } catch (const UsageError& e) {
      log::warn("{}; this node's events are not written", e.what());
      m_held.clear();
      m_open = true;  // and m_fd stays closed: nothing more is tried
      return;
    }
  }
  for (const auto& line : m_held) {
    write_line(line);
  }
  m_held.clear();
}

void EventLog::emit(double wall_time, std::string_view event, const EventFields& fields) {
  std::string line = fmt::format("{{\"time\":{:.3f},\"event\":", wall_time);
  line += json_text(nlohmann::json(event));
  line += ",\"node\":";
  line += m_node_rank ? std::to_string(*m_node_rank) : std::string("null");
  line += ",\"host\":";
  line += json_text(nlohmann::json(m_host));
  line += fields.encoded();
  line += "}\n";
  if (m_keep > 0) {
    if (m_recent.size() == m_keep) {
      m_recent.pop_front();
    }
    m_recent.push_back(line);
  }
  if (!m_open && m_path != "-") {
    m_held.push_back(std::move(line));
    return;
  }
  write_line(line);
}

void EventLog::write_line(const std::string& line) {
  if (m_path.empty()) {
    return;
  } else if (m_path == "-") {
    m_console.write(2, line);
  } else if (m_fd && !posix::write_all(m_fd.get(), line)) {
    log::warn("--event-log {}: cannot write to it ({}); no more events are written there", m_path,
              std::strerror(errno));
    m_fd.close();
  }
}

}  // namespace ddplaunch
