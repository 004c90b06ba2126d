// Turning workers' byte streams into whole, prefixed lines. Pure: no system
// calls (LinePrefix is handed the time). One LineSplitter per stream; not
// thread-safe (one reader owns it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

namespace ddplaunch {

// Splits a byte stream into lines. Holds at most `max_line` bytes of an
// unfinished line: a longer line is handed out in pieces of that size.
class LineSplitter {
 public:
  static constexpr size_t k_default_max_line = 64 * 1024;
  explicit LineSplitter(size_t max_line = k_default_max_line) : m_max_line(max_line) {}

  // Calls on_line(text) for every complete line in `data` (text without '\n'),
  // and for every `max_line` piece of an over-long line.
  template <typename OnLine>
  void feed(std::string_view data, OnLine&& on_line);

  // Hands out an unfinished last line, if any (end of stream).
  template <typename OnLine>
  void finish(OnLine&& on_line);

  size_t buffered() const { return m_partial.size(); }

 private:
  size_t m_max_line;
  std::string m_partial;
};

// A --prefix template with fields {rank} {local_rank} {node_rank} {host} {time}.
// All fields but {time} are fixed per stream, so they are expanded once.
class LinePrefix {
 public:
  struct Fields {
    int rank = 0;
    int local_rank = 0;
    int node_rank = 0;
    std::string host;
  };
  LinePrefix(std::string_view tmpl, const Fields& fields);

  // Appends the prefix for a line printed at wall-clock time `now` to `out`.
  void append_to(std::string& out, std::time_t now) const;
  bool empty() const { return m_parts.size() == 1 && m_parts[0].empty(); }

 private:
  // Fixed text between {time} fields: text, time, text, time, ..., text.
  std::deque<std::string> m_parts;
};

// Prefixed lines gathered for one write: the console gets one write() per
// batch rather than one per line. Grows as needed (a line is at most the
// LineSplitter's bound plus its prefix); flush when must_flush() says so.
class LineBatch {
 public:
  static constexpr size_t k_flush_bytes = 128 * 1024;

  // Appends prefix + line + "\n".
  void add(std::string_view prefix, std::string_view line);
  bool must_flush() const { return m_size >= k_flush_bytes; }
  bool empty() const { return m_size == 0; }
  std::string_view data() const { return {m_buf.get(), m_size}; }
  void clear() { m_size = 0; }

 private:
  std::unique_ptr<char[]> m_buf;
  size_t m_size = 0;
  size_t m_capacity = 0;
};

// The last few lines of a stream (for failure reports), bounded in count
// and in bytes per line.
class TailBuffer {
 public:
  explicit TailBuffer(size_t max_lines = 10, size_t max_line_bytes = 512)
      : m_max_lines(max_lines), m_max_line_bytes(max_line_bytes) {}
  void push(std::string_view line);
  const std::deque<std::string>& lines() const { return m_lines; }

 private:
  size_t m_max_lines;
  size_t m_max_line_bytes;
  std::deque<std::string> m_lines;
};

template <typename OnLine>
void LineSplitter::feed(std::string_view data, OnLine&& on_line) {
  while (!data.empty()) {
    const void* nl = std::memchr(data.data(), '\n', data.size());
    if (nl == nullptr) {
      // No end of line: buffer, flushing full pieces of an over-long line.
      while (m_partial.size() + data.size() >= m_max_line) {
        size_t take = m_max_line - m_partial.size();
        m_partial.append(data.substr(0, take));
        on_line(std::string_view(m_partial));
        m_partial.clear();
        data.remove_prefix(take);
      }
      m_partial.append(data);
      return;
    }
    size_t len = static_cast<size_t>(static_cast<const char*>(nl) - data.data());
    if (m_partial.empty()) {
      if (len <= m_max_line) {
        on_line(data.substr(0, len));
      } else {
        for (size_t off = 0; off < len; off += m_max_line) {
          on_line(data.substr(off, std::min(m_max_line, len - off)));
        }
      }
    } else {
      std::string_view rest = data.substr(0, len);
      while (m_partial.size() + rest.size() > m_max_line) {
        size_t take = m_max_line - m_partial.size();
        m_partial.append(rest.substr(0, take));
        on_line(std::string_view(m_partial));
        m_partial.clear();
        rest.remove_prefix(take);
      }
      m_partial.append(rest);
      on_line(std::string_view(m_partial));
      m_partial.clear();
    }
    data.remove_prefix(len + 1);
  }
}

template <typename OnLine>
void LineSplitter::finish(OnLine&& on_line) {
  if (!m_partial.empty()) {
    on_line(std::string_view(m_partial));
    m_partial.clear();
  }
}

}  // namespace ddplaunch
