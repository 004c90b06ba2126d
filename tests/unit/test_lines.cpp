#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../helpers/line_batches.hpp"
#include "output/lines.hpp"

namespace ddplaunch {
namespace {

std::vector<std::string> split(const std::vector<std::string>& chunks, size_t max_line,
                               bool finish = true) {
  LineSplitter s(max_line);
  std::vector<std::string> lines;
  auto on = [&](std::string_view l, LineEnd end) {
    lines.emplace_back(std::string(l) + (end == LineEnd::k_return ? "<CR>" : "") +
                       (end == LineEnd::k_bare_newline ? "<NL>" : ""));
  };
  for (const auto& c : chunks) {
    s.feed(c, on);
  }
  if (finish) {
    s.finish(on);
  }
  return lines;
}

using Lines = std::vector<std::string>;

TEST(LineSplitter, Table) {
  struct Case {
    Lines chunks;
    size_t max;
    Lines lines;
  };
  const Case cases[] = {
      {{"a\nb\n"}, 100, {"a", "b"}},
      {{"a", "b", "c\n"}, 100, {"abc"}},              // a line across three reads
      {{"a\n", "", "b"}, 100, {"a", "b"}},            // final line without newline is flushed
      {{"\n\n"}, 100, {"", ""}},                      // empty lines survive
      {{"abcdefghij\n"}, 4, {"abcd", "efgh", "ij"}},  // over-long line in pieces
      {{"ab", "cdefghij\n"}, 4, {"abcd", "efgh", "ij"}},
      {{"abcdefgh"}, 4, {"abcd", "efgh"}},  // exact multiple, no newline
      {{"abc", "def", "\nx"}, 4, {"abcd", "ef", "x"}},
      // Progress bars: each '\r' update comes out at once, whole.
      {{"\r 10%|#", "   |\r 20%|##  |\r", "100%|####|\n"},
       100,
       {"<CR>", " 10%|#<CR>", " 10%|#   |<CR>", " 20%|##  |<CR>", "100%|####|"}},
      {{"dos line\r\nnext\r\n"}, 100, {"dos line", "next"}},  // "\r\n" is one line end
      {{"dos line\r", "\nnext\n"}, 100, {"dos line<CR>", "<NL>", "next"}},  // split across reads
      // ... and the line after it is a line, not a progress bar's update.
      {{"dos line\r", "\nne", "xt\n"}, 100, {"dos line<CR>", "<NL>", "next"}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(split(c.chunks, c.max), c.lines) << ::testing::PrintToString(c.chunks);
  }
}

TEST(LineSplitter, NeverBuffersMoreThanTheBound) {
  LineSplitter s(16);
  size_t pieces = 0;
  for (int i = 0; i < 1000; ++i) {
    s.feed("0123456789", [&](std::string_view l, LineEnd) {
      EXPECT_EQ(l.size(), 16u);
      ++pieces;
    });
    EXPECT_LE(s.buffered(), 16u);
  }
  // The last 16 bytes wait: a '\n' next would make them a line of their own.
  EXPECT_EQ(pieces, 10000u / 16u - 1);
}

// A line of exactly the bound is one line however the reads cut it, not a
// piece and then an empty line (found by fuzz_lines).
TEST(LineSplitter, ALineOfTheBoundIsOneLineHoweverItIsRead) {
  for (const Lines& chunks : {Lines{"0123456789abcdef\n"}, Lines{"0123456789abcdef", "\n"},
                              Lines{"01234567", "89abcdef", "\nnext\n"}}) {
    const Lines lines = split(chunks, 16);
    ASSERT_GE(lines.size(), 1u);
    EXPECT_EQ(lines[0], "0123456789abcdef");
    EXPECT_EQ(lines.size(), chunks.back() == "\nnext\n" ? 2u : 1u);
  }
  EXPECT_EQ(split({"0123456789abcdefg"}, 16), (Lines{"0123456789abcdef", "g"}));
}

TEST(LineSplitter, NothingIsLostOverRandomChunking) {
  std::string text;
  for (int i = 0; i < 500; ++i) {
    text += "line " + std::to_string(i) + std::string(static_cast<size_t>(i % 37), '.') + "\n";
  }
  Lines chunks;
  for (size_t off = 0, step = 1; off < text.size(); off += step, step = step * 7 % 61 + 1) {
    chunks.push_back(text.substr(off, step));
  }
  Lines lines = split(chunks, 1024);
  ASSERT_EQ(lines.size(), 500u);
  for (int i = 0; i < 500; ++i) {
    EXPECT_EQ(lines[static_cast<size_t>(i)],
              "line " + std::to_string(i) + std::string(static_cast<size_t>(i % 37), '.'));
  }
}

TEST(LinePrefix, ExpandsFields) {
  LinePrefix::Fields f{12, 3, 1, "gpu7"};
  std::string out;
  LinePrefix("[{rank}|{local_rank}|{node_rank}@{host}] ", f).append_to(out, 0);
  EXPECT_EQ(out, "[12|3|1@gpu7] ");
  out.clear();
  LinePrefix("", f).append_to(out, 0);
  EXPECT_EQ(out, "");
  EXPECT_TRUE(LinePrefix("", f).empty());
}

TEST(LinePrefix, TimeIsFormattedPerLine) {
  LinePrefix p("{time} r{rank}: ", LinePrefix::Fields{5, 0, 0, "h"});
  std::string out;
  p.append_to(out, 1'700'000'000);
  ASSERT_EQ(out.size(), std::string("HH:MM:SS r5: ").size());
  EXPECT_EQ(out[2], ':');
  EXPECT_EQ(out.substr(8), " r5: ");
}

TEST(TailBuffer, KeepsTheLastLinesBounded) {
  TailBuffer t(3, 5);
  for (const char* l : {"one", "two", "three", "four-long-line"}) {
    t.push(l);
  }
  ASSERT_EQ(t.lines().size(), 3u);
  EXPECT_EQ(t.lines()[0], "two");
  EXPECT_EQ(t.lines()[2], "four-");
}

TEST(TailBuffer, KeepsOnlyTheNewestAfterManyLines) {
  TailBuffer t(2, 100);
  for (int i = 0; i < 1000; ++i) {
    t.push("line " + std::to_string(i));
  }
  ASSERT_EQ(t.lines().size(), 2u);
  EXPECT_EQ(t.lines()[0], "line 998");
  EXPECT_EQ(t.lines()[1], "line 999");
}

TEST(LineBatch, GathersPrefixedLinesInOrder) {
  LineBatch b;
  EXPECT_TRUE(b.empty());
  b.add("[rank 0]: ", "hello");
  b.add("", "");
  b.add("[rank 1]: ", "world");
  EXPECT_EQ(b.data(), "[rank 0]: hello\n\n[rank 1]: world\n");
  b.clear();
  EXPECT_TRUE(b.empty());
  b.add("p ", "again");
  EXPECT_EQ(b.data(), "p again\n");
}

TEST(LineBatch, AsksForAFlushOnceBigAndKeepsEverythingWhenGrowing) {
  LineBatch b;
  const std::string line(1000, 'x');
  size_t lines = 0;
  while (!b.must_flush()) {
    b.add("r: ", line);
    ++lines;
  }
  EXPECT_EQ(lines, LineBatch::k_flush_bytes / 1004 + 1);
  const std::string big(LineSplitter::k_default_max_line, 'y');  // longer than what is left
  b.add("r: ", big);
  EXPECT_EQ(b.data().size(), lines * 1004 + big.size() + 4);
  EXPECT_EQ(b.data().substr(b.data().size() - 5), "yyyy\n");
  EXPECT_EQ(b.data().substr(0, 4), "r: x");
}

std::vector<LineBatch::Simd> simds_here() {
  std::vector<LineBatch::Simd> simds{LineBatch::Simd::k_none};
  if (LineBatch::simd_here() != LineBatch::Simd::k_none) {
    simds.push_back(LineBatch::Simd::k_sse2);
  }
  if (LineBatch::simd_here() == LineBatch::Simd::k_avx2) {
    simds.push_back(LineBatch::Simd::k_avx2);
  }
  return simds;
}

// The many-lines form adds exactly what add() would, for lines of every
// length up to past the bound, at every distance from the end of what may
// be read, and stops where a '\r' is. The text lies in a heap block of its
// exact size, so a load past its end is an error under the sanitizers' build.
TEST(LineBatch, TheManyLinesFormAddsWhatAddWould) {
  LineBatch batch;
  for (const auto simd : simds_here()) {
    for (const std::string prefix : {"", "[rank 3]: ", "exactly 16 bytes", "seventeen bytes: "}) {
      for (size_t len = 0; len < 150; ++len) {
        for (size_t after = 0; after < 40; after += 3) {  // bytes after the last '\n'
          std::string text;
          for (size_t i = 0; i < 5; ++i) {
            text += std::string(len + i, static_cast<char>('a' + (len + i) % 26)) + "\n";
          }
          if (after % 2 == 1 && len > 0) {
            text[(len * 7 + after * 13) % (text.size() - 1)] = '\r';  // somewhere in a line
          }
          text += std::string(after, 'z');
          const auto exact = std::make_unique<char[]>(text.size());
          std::memcpy(exact.get(), text.data(), text.size());
          size_t quick_lines = 0;
          const std::string quick =
              batch_quickly(batch, simd, prefix, exact.get(), text.size(), 64, quick_lines);
          EXPECT_EQ(quick, batch_slowly(prefix, text, 64))
              << static_cast<int>(simd) << " " << prefix << " " << len << " " << after;
          if (simd == LineBatch::Simd::k_none || prefix.size() > 16) {
            EXPECT_EQ(quick_lines, 0U) << "only add() adds";
          }
        }
      }
    }
  }
}

// Over batches: lines of assorted lengths, more than one batch holds, every
// line where add() would put it, and almost all of them taken many at a time.
TEST(LineBatch, TheManyLinesFormFillsBatchAfterBatch) {
  std::string text;
  uint32_t seed = 7;
  size_t lines = 0;
  while (text.size() < 3 * LineBatch::k_flush_bytes) {
    seed = seed * 1103515245 + 12345;
    text += std::string((seed >> 16) % 300, static_cast<char>('a' + lines % 26)) + "\n";
    ++lines;
  }
  text += std::string(5000, 'y') + "\n" + "tail";  // a line longer than the room a batch keeps
  ++lines;
  for (const auto simd : simds_here()) {
    size_t quick_lines = 0;
    const std::string quick = batch_quickly(simd, "[0]: ", text.data(), text.size(),
                                            LineSplitter::k_default_max_line, quick_lines);
    EXPECT_EQ(quick, batch_slowly("[0]: ", text, LineSplitter::k_default_max_line));
    if (simd != LineBatch::Simd::k_none) {
      EXPECT_GE(quick_lines, lines - 10) << static_cast<int>(simd);
    }
  }
}

}  // namespace
}  // namespace ddplaunch
