// EventLog: --event-log's file (or "-", stderr through the console), one
// JSON object a line for each event of the job (docs/EVENTS.md): its time,
// its name, the node that wrote it, and the event's own fields. Lines wait
// in memory until the node knows its rank, where the path holds
// "{node_rank}" (as --summary-json's does). Written with one write() a line
// (O_APPEND: several agents may share a file), on the caller's thread.
// Not thread-safe.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "posix/fd.hpp"

namespace ddplaunch {

class ConsoleSink;

// An event's own fields, each encoded as JSON as it is added.
class EventFields {
 public:
  EventFields& num(std::string_view key, long long value);
  EventFields& real(std::string_view key, double value);
  EventFields& text(std::string_view key, std::string_view value);
  EventFields& flag(std::string_view key, bool value);
  EventFields& null(std::string_view key);
  // text(), or null() for nullopt; num(), or null() for nullopt.
  EventFields& text_or_null(std::string_view key, const std::optional<std::string>& value);
  EventFields& num_or_null(std::string_view key, std::optional<long long> value);
  const std::string& encoded() const { return m_encoded; }

 private:
  void key(std::string_view key);
  std::string m_encoded;  // `,"key":value` for each field
};

class EventLog {
 public:
  // PATH: a file, appended to ("{node_rank}" in it is this node's rank),
  // "-" for stderr through CONSOLE, or "" for none (recent() only). Throws UsageError, naming the
  // option, where the file cannot be written.
  EventLog(const std::string& path, ConsoleSink& console, std::string host);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // This node's rank, once known: the held lines are written.
  void set_node_rank(int node_rank);
  std::optional<int> node_rank() const { return m_node_rank; }
  // One event at `wall_time` (seconds since the epoch).
  void emit(double wall_time, std::string_view event, const EventFields& fields = {});
  // The last `lines` events are kept in memory too (--metrics-port's page
  // draws its timeline from them); recent() gives them, oldest first.
  void keep_recent(size_t lines) { m_keep = lines; }
  const std::deque<std::string>& recent() const { return m_recent; }

 private:
  void open();
  void write_line(const std::string& line);

  std::string m_path;
  ConsoleSink& m_console;
  std::string m_host;
  std::optional<int> m_node_rank;
  posix::Fd m_fd;
  bool m_open = false;
  std::vector<std::string> m_held;  // lines before the path's node rank was known
  size_t m_keep = 0;
  std::deque<std::string> m_recent;
};

// The path with "{node_rank}" replaced; the same path without it.
std::string event_log_path(const std::string& path, int node_rank);

}  // namespace ddplaunch
