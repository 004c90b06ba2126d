#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

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
    EXPECT_LT(s.buffered(), 16u);
  }
  EXPECT_EQ(pieces, 10000u / 16u);
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

// The one-pass form adds exactly what add() would, for lines of every length
// and at every distance from the end of what may be read, or adds nothing.
TEST(LineBatch, TheScanningFormAddsWhatAddWouldOrNothing) {
  for (const std::string prefix : {"", "[rank 3]: ", "exactly 16 bytes"}) {
    char prefix16[16] = {};
    std::memcpy(prefix16, prefix.data(), prefix.size());
    for (size_t len = 0; len < 80; ++len) {
      for (size_t after = 0; after < 40; ++after) {  // readable bytes after the '\n'
        const std::string text =
            std::string(len, 'a' + static_cast<char>(len % 26)) + "\n" + std::string(after, '\n');
        LineBatch quick;
        quick.add("x", "before");
        const char* p = text.data();
        const bool taken =
            quick.add_scanning(prefix16, prefix.size(), p, text.data() + text.size(), 64);
        LineBatch slow;
        slow.add("x", "before");
        // Refused only where the load that would find the '\n' passes the
        // end of what may be read, or the line is at the bound (64 here).
        EXPECT_EQ(taken, !(text.size() < 16 + len / 16 * 16 || len >= 64)) << len << " " << after;
        if (taken) {
          slow.add(prefix, std::string_view(text).substr(0, len));
          EXPECT_EQ(quick.data(), slow.data()) << len << " " << after;
          EXPECT_EQ(p, text.data() + len + 1);
        } else {
          EXPECT_EQ(quick.data(), slow.data()) << "nothing added";
          EXPECT_EQ(p, text.data());
        }
      }
    }
  }
}

TEST(LineBatch, TheScanningFormTakesNoLongerPrefix) {
  char prefix16[16] = {};
  const std::string text(100, '\n');
  const char* p = text.data();
  LineBatch b;
  EXPECT_FALSE(b.add_scanning(prefix16, 17, p, text.data() + text.size(), 64));
  EXPECT_TRUE(b.empty());
}

}  // namespace
}  // namespace ddplaunch
