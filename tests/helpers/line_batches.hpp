// Batching a run of whole lines the quick way (LineBatch::add_lines, as
// OutputRouter::take_plain_lines does) and the plain way (add() line by
// line), for the unit tests and the fuzzer that hold them equal.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "output/lines.hpp"

namespace ddplaunch {

// What take_plain_lines() does with a run of whole lines: add_lines() for as
// many as it takes, add() one line where it takes none, a flush when the
// batch asks. Returns everything flushed, with "<cut>" where a line reached
// max_line or held a '\r' (the splitter's cases), and counts the lines
// add_lines() took. `batch` is cleared first: a caller that batches many
// texts keeps one (a new batch's 132 KiB buffer, zeroed under ASan, cost the
// unit test most of its time).
inline std::string batch_quickly(LineBatch& batch, LineBatch::Simd simd, const std::string& prefix,
                                 const char* text, size_t size, size_t max_line,
                                 size_t& quick_lines) {
  char prefix16[16] = {};
  std::memcpy(prefix16, prefix.data(), std::min<size_t>(prefix.size(), 16));
  const char* p = text;
  const char* const end = text + size;
  const char* last = static_cast<const char*>(memrchr(text, '\n', size));
  const char* const run_end = last == nullptr ? text : last + 1;
  batch.clear();
  std::string out;
  quick_lines = 0;
  while (p < run_end) {
    const size_t added = batch.add_lines(simd, prefix16, prefix.size(), p, run_end, end, max_line);
    if (added == 0) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', run_end - p));
      const auto len = static_cast<size_t>(nl - p);
      if (len >= max_line || std::memchr(p, '\r', len) != nullptr) {
        return out + std::string(batch.data()) + "<cut>";
      }
      batch.add(prefix, {p, len});
      p = nl + 1;
    }
    quick_lines += added;
    if (batch.must_flush()) {
      out += batch.data();
      batch.clear();
    }
  }
  out += batch.data();
  return out;
}

inline std::string batch_quickly(LineBatch::Simd simd, const std::string& prefix, const char* text,
                                 size_t size, size_t max_line, size_t& quick_lines) {
  LineBatch batch;
  return batch_quickly(batch, simd, prefix, text, size, max_line, quick_lines);
}

// What add() alone gives for the same run.
inline std::string batch_slowly(const std::string& prefix, std::string_view text, size_t max_line) {
  std::string out;
  size_t from = 0;
  for (size_t nl = text.find('\n'); nl != std::string_view::npos; nl = text.find('\n', from)) {
    if (nl - from >= max_line || text.substr(from, nl - from).find('\r') != std::string::npos) {
      return out + "<cut>";
    }
    out += prefix;
    out += text.substr(from, nl + 1 - from);
    from = nl + 1;
  }
  return out;
}

}  // namespace ddplaunch
