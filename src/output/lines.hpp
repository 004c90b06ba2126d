// Turning workers' byte streams into whole, prefixed lines. Pure: no system
// calls (LinePrefix is handed the time). One LineSplitter per stream; not
// thread-safe (one reader owns it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ddplaunch {

// The '\n' bytes in `data`, 16 at a time where the CPU has SSE2.
size_t count_newlines(std::string_view data);

// How a piece of output ended.
enum class LineEnd : char {
  k_newline,       // '\n' (or "\r\n"): a whole line
  k_return,        // '\r': a progress bar's update, redrawn in place
  k_piece,         // a piece of an over-long line, or the unfinished end of a stream
  k_bare_newline,  // the '\n' of a "\r\n" whose '\r' came in the previous read
};

// Splits a byte stream into lines, and into the '\r'-terminated updates
// progress bars (tqdm, Hugging Face, Lightning) redraw one line with. Holds
// at most `max_line` bytes of an unfinished line: a longer line is handed out
// in pieces of that size.
class LineSplitter {
 public:
  static constexpr size_t k_default_max_line = 64 * 1024;
  explicit LineSplitter(size_t max_line = k_default_max_line) : m_max_line(max_line) {}

  // Calls on_line(text, end) for every complete line or '\r' update in
  // `data` (text without its terminator), and for every `max_line` piece of
  // an over-long line.
  template <typename OnLine>
  void feed(std::string_view data, OnLine&& on_line);

  // Hands out an unfinished last line, if any (end of stream).
  template <typename OnLine>
  void finish(OnLine&& on_line);

  size_t buffered() const { return m_partial.size(); }
  size_t max_line() const { return m_max_line; }
  // Nothing pending: the next byte starts a line of its own (no unfinished
  // line, no '\r' update being drawn). Only then may a caller take whole
  // lines itself, bypassing feed().
  bool at_line_start() const { return m_partial.empty() && !m_after_return && !m_updating; }

 private:
  template <typename OnLine>
  void emit(std::string_view text, LineEnd end, OnLine& on_line);

  size_t m_max_line;
  std::string m_partial;
  bool m_after_return = false;  // the last read ended with '\r'
  bool m_updating = false;      // the last end was '\r': a progress bar is drawing
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
  std::vector<std::string> m_parts;
};

// Prefixed lines gathered for one write: the console gets one write() per
// batch rather than one per line. Grows as needed (a line is at most the
// LineSplitter's bound plus its prefix); flush when must_flush() says so.
// Its buffer may be handed over whole (buffer()), and another taken back.
class LineBatch {
 public:
  static constexpr size_t k_flush_bytes = 128 * 1024;
  // The size a batch's buffer is kept at: a flush's worth and room for lines past it.
  static constexpr size_t k_buffer_bytes = k_flush_bytes + 4096;

  // Appends prefix + line + "\n" ("\r" for a progress update): copied into
  // room already there (the string is kept at its full size, its used part
  // counted apart), so a line costs two memcpy and no size checks of its own.
  void add(std::string_view prefix, std::string_view line, char end = '\n') {
    const size_t need = m_used + prefix.size() + line.size() + 1;
    if (need > m_buf.size()) {
      m_buf.resize(std::max(need, k_buffer_bytes));
    }
    char* p = m_buf.data() + m_used;
    std::memcpy(p, prefix.data(), prefix.size());
    p += prefix.size();
    std::memcpy(p, line.data(), line.size());
    p[line.size()] = end;
    m_used = need;
  }
  // The vector instructions add_lines() uses: the best this CPU has, or one
  // a test picks (k_none adds nothing).
  enum class Simd { k_none, k_sse2, k_avx2 };
  static Simd simd_here();
  // The quick form of add(prefix, line) for a flood of whole lines. It finds
  // the '\n's 64 bytes at a time and copies each line with its '\n' in 16-
  // or 32-byte pieces: no call per line, and no line waits on the search of
  // the one before. Adds lines from `p` (a line's start), moves `p` past the
  // last one added and returns how many. It leaves to add() a line ending
  // at or after `run_end`, one of `max_line` bytes or more, one holding a
  // '\r', one that does not fit the room left, and whatever lies within 96
  // bytes of `readable_end` (its loads and copies pass a line's end, never
  // readable_end); it stops once must_flush(). The prefix, at most 16 bytes
  // (nothing is added for a longer one), comes padded to 16.
  size_t add_lines(const char (&prefix16)[16], size_t prefix_size, const char*& p,
                   const char* run_end, const char* readable_end, size_t max_line) {
    return add_lines(simd_here(), prefix16, prefix_size, p, run_end, readable_end, max_line);
  }
  size_t add_lines(Simd simd, const char (&prefix16)[16], size_t prefix_size, const char*& p,
                   const char* run_end, const char* readable_end, size_t max_line);
  bool must_flush() const { return m_used >= k_flush_bytes; }
  bool empty() const { return m_used == 0; }
  std::string_view data() const { return {m_buf.data(), m_used}; }
  void clear() { m_used = 0; }
  // The string holding data() at its start, which may be handed over whole
  // (and another, of any size and contents, left in its place); clear()
  // afterwards. Its size is not the data's: a string kept at its full size
  // is never filled with zeros again (resize) for the next batch.
  std::string& buffer() { return m_buf; }

 private:
  std::string m_buf;
  size_t m_used = 0;
};

// The last few lines of a stream (for failure reports), bounded in count
// and in bytes per line.
class TailBuffer {
 public:
  explicit TailBuffer(size_t max_lines = 10, size_t max_line_bytes = 512)
      : m_max_lines(max_lines), m_max_line_bytes(max_line_bytes) {}
  void push(std::string_view line);
  // Oldest first.
  std::vector<std::string> lines() const;
  // Keeps up to `max_lines` from now on, the lines held so far included.
  void grow(size_t max_lines);

 private:
  size_t m_max_lines;
  size_t m_max_line_bytes;
  // A ring, empty (no allocation: one per rank) until the first line.
  std::vector<std::string> m_ring;
  size_t m_next = 0;  // where the next line goes once the ring is full
};

template <typename OnLine>
void LineSplitter::emit(std::string_view text, LineEnd end, OnLine& on_line) {
  if (m_partial.empty() && text.size() <= m_max_line) {
    on_line(text, end);
    return;
  }
  while (m_partial.size() + text.size() > m_max_line) {
    const size_t take = m_max_line - m_partial.size();
    m_partial.append(text.substr(0, take));
    on_line(std::string_view(m_partial), LineEnd::k_piece);
    m_partial.clear();
    text.remove_prefix(take);
  }
  m_partial.append(text);
  on_line(std::string_view(m_partial), end);
  m_partial.clear();
}

template <typename OnLine>
void LineSplitter::feed(std::string_view data, OnLine&& on_line) {
  while (!data.empty()) {
    if (m_after_return) {
      m_after_return = false;
      if (data.front() == '\n') {  // "\r\n" split across reads: end the line
        on_line(std::string_view(), LineEnd::k_bare_newline);
        m_updating = false;  // what follows is a new line, not the update's
        data.remove_prefix(1);
        continue;
      }
    }
    const char* begin = data.data();
    const char* nl = static_cast<const char*>(std::memchr(begin, '\n', data.size()));
    const size_t scan = nl != nullptr ? static_cast<size_t>(nl - begin) : data.size();
    const char* cr = static_cast<const char*>(std::memchr(begin, '\r', scan));
    const char* end = cr != nullptr ? cr : nl;
    if (end == nullptr) {
      // No end of line: buffer, flushing full pieces of an over-long line.
      while (m_partial.size() + data.size() > m_max_line) {
        size_t take = m_max_line - m_partial.size();
        m_partial.append(data.substr(0, take));
        on_line(std::string_view(m_partial), LineEnd::k_piece);
        m_partial.clear();
        data.remove_prefix(take);
      }
      m_partial.append(data);
      if (m_updating && !m_partial.empty()) {
        // A progress update shown now, whole so far; redrawn whole when it ends.
        on_line(std::string_view(m_partial), LineEnd::k_return);
      }
      return;
    }
    const auto len = static_cast<size_t>(end - begin);
    if (*end == '\r' && len + 1 < data.size() && data[len + 1] == '\n') {
      emit(data.substr(0, len), LineEnd::k_newline, on_line);  // "\r\n"
      m_updating = false;
      data.remove_prefix(len + 2);
      continue;
    }
    emit(data.substr(0, len), *end == '\r' ? LineEnd::k_return : LineEnd::k_newline, on_line);
    m_after_return = *end == '\r' && len + 1 == data.size();
    m_updating = *end == '\r';
    data.remove_prefix(len + 1);
  }
}

template <typename OnLine>
void LineSplitter::finish(OnLine&& on_line) {
  if (!m_partial.empty()) {
    on_line(std::string_view(m_partial), LineEnd::k_piece);
    m_partial.clear();
  }
}

}  // namespace ddplaunch
