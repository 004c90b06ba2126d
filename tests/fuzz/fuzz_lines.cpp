// libFuzzer: a worker's bytes on their way to the console. Batching a run of
// whole lines the quick way (LineBatch::add_lines: 64 bytes scanned at a
// time, lines copied in 16- or 32-byte pieces past their ends) must add
// exactly what add() adds line by line, whatever the bytes, the prefix's
// length and the line bound, and read nothing outside the input (libFuzzer
// hands it over as a heap block of its own size, so ASan sees a load past
// its end). The splitter must cut the same lines from the bytes however
// they come.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "../helpers/line_batches.hpp"
#include "output/lines.hpp"

using namespace ddplaunch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) {
    return 0;
  }
  // Three bytes of settings, then the worker's bytes.
  const std::string prefix(data[0] % 18, static_cast<char>('0' + data[0] % 10));
  const size_t max_line = data[1] < 200 ? 1 + data[1] : LineSplitter::k_default_max_line;
  const auto simd = static_cast<LineBatch::Simd>(
      std::min<int>(data[2] % 3, static_cast<int>(LineBatch::simd_here())));
  const char* text = reinterpret_cast<const char*>(data + 3);
  const size_t text_size = size - 3;

  size_t quick_lines = 0;
  const std::string quick = batch_quickly(simd, prefix, text, text_size, max_line, quick_lines);
  if (quick != batch_slowly(prefix, std::string_view(text, text_size), max_line)) {
    __builtin_trap();
  }

  // The splitter, fed in reads of 1 to 64 bytes: no line over the bound,
  // and without a '\r' (whose updates show as they come) the very lines it
  // cuts from the whole text at once.
  auto split = [&](size_t step) {
    LineSplitter splitter(max_line);
    std::string lines;
    auto on_line = [&](std::string_view line, LineEnd end) {
      if (line.size() > max_line) {
        __builtin_trap();
      }
      lines.append(line).push_back(static_cast<char>('0' + static_cast<int>(end)));
    };
    for (size_t at = 0; at < text_size; at += step) {
      splitter.feed(std::string_view(text + at, std::min(step, text_size - at)), on_line);
    }
    splitter.finish(on_line);
    return lines;
  };
  const std::string in_reads = split(1 + data[2] % 64);
  if (std::string_view(text, text_size).find('\r') == std::string_view::npos &&
      in_reads != split(text_size + 1)) {
    __builtin_trap();
  }
  return 0;
}
