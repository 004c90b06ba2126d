#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "supervise/hang_stacks.hpp"

namespace ddplaunch {
namespace {

using Lines = std::vector<std::string>;

// Python's faulthandler on SIGABRT, with a second thread: the current
// (main) thread's stack is the one read, innermost call first.
TEST(HangStacks, PythonsMainThreadIsReadFromFaulthandler) {
  const Lines lines = {"some output before",
                       "Fatal Python error: Aborted",
                       "",
                       "Thread 0x00007f200baee6c0 (most recent call first):",
                       "  File \"/tmp/x/h.py\", line 5 in bg",
                       "  File \"/usr/lib/python3.11/threading.py\", line 975 in run",
                       "",
                       "Current thread 0x00007f200bda9040 (most recent call first):",
                       "  File \"/tmp/x/h.py\", line 3 in fetch_next_batch",
                       "  File \"/tmp/x/h.py\", line 8 in main",
                       "  File \"/tmp/x/h.py\", line 9 in <module>",
                       "",
                       "Extension modules: torch._C, numpy.core._multiarray_umath (total: 2)"};
  EXPECT_EQ(main_thread_stack(lines), "fetch_next_batch ← main ← <module>");
  // A program with one thread: "Stack (most recent call first):".
  EXPECT_EQ(main_thread_stack({"Fatal Python error: Aborted", "",
                               "Stack (most recent call first):", "  File \"t.py\", line 2 in step",
                               "  File \"t.py\", line 4 in <module>"}),
            "step ← <module>");
}

TEST(HangStacks, NativeStacksAreReadFromEuStackAndGdb) {
  const Lines eu = {"PID 25345 - process",
                    "TID 25345:",
                    "#0  0x00007f5cbe90d503 clock_nanosleep@GLIBC_2.2.5",
                    "#1  0x00007f5cbe911e53 __nanosleep",
                    "#2  0x000055acf58a94af",
                    "TID 25346:",
                    "#0  0x00007f5cbe90d503 epoll_wait"};
  EXPECT_EQ(main_thread_stack(eu), "clock_nanosleep ← __nanosleep ← ??");
  const Lines gdb = {
      "Thread 2 (Thread 0x7f..a (LWP 12) \"worker\"):",
      "#0  0x00007f in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6",
      "",
      "Thread 1 (Thread 0x7f..b (LWP 11) \"train\"):",
      "#0  0x00007f5cbe911e53 in __GI___nanosleep (req=<optimized out>) at nanosleep.c:25",
      "#1  0x000055acf58a94af in wait_for_peer () at train.c:10",
      "#2  main () at train.c:20",
      "[Inferior 1 (process 11) detached]"};
  EXPECT_EQ(main_thread_stack(gdb), "__GI___nanosleep ← wait_for_peer ← main");
}

TEST(HangStacks, LongStacksAreCutAndNoStackIsEmpty) {
  Lines lines = {"Current thread 0x1 (most recent call first):"};
  for (int i = 0; i < 12; ++i) {
    lines.push_back("  File \"a.py\", line 1 in f" + std::to_string(i));
  }
  EXPECT_EQ(main_thread_stack(lines), "f0 ← f1 ← f2 ← f3 ← f4 ← f5 ← f6 ← f7 ← …");
  EXPECT_EQ(main_thread_stack({"Traceback (most recent call last):", "ValueError: x"}), "");
  EXPECT_EQ(main_thread_stack({}), "");
}

RankOutcome hung(int rank, double seconds, std::string stack) {
  RankOutcome o;
  o.rank = rank;
  o.local_rank = rank;
  o.hung_for_s = seconds;
  o.stack = std::move(stack);
  return o;
}

// Eight ranks stuck in a collective and one that stopped in its own code
// first: the odd one out is blamed and listed first, however long the
// others went without progress.
TEST(HangStacks, TheRankWhoseStackDiffersIsBlamedAndListedFirst) {
  std::vector<RankOutcome> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.push_back(hung(r, r == 3 ? 5.1 : 6.0,
                         r == 3 ? "fetch_next_batch ← main" : "all_reduce ← step ← main"));
  }
  RankOutcome busy;  // made progress: not hung, not listed
  busy.rank = 8;
  ranks.push_back(busy);
  EXPECT_EQ(hang_culprit(ranks), 3u);
  EXPECT_EQ(format_hung_stacks(ranks),
            "  rank 3: fetch_next_batch ← main\n"
            "  ranks 0-2,4-7: all_reduce ← step ← main\n");
}

// Two ranks, each with its own stack: the one outside communication is
// blamed, though the one in all_reduce went longer without progress.
TEST(HangStacks, ARankOutsideCommunicationIsBlamedBeforeOneWaitingInIt) {
  const std::vector<RankOutcome> ranks = {hung(0, 6.0, "all_reduce ← wrapper ← step ← main"),
                                          hung(1, 5.0, "fetch_next_batch ← main")};
  EXPECT_EQ(hang_culprit(ranks), 1u);
  EXPECT_EQ(format_hung_stacks(ranks),
            "  rank 1: fetch_next_batch ← main\n"
            "  rank 0: all_reduce ← wrapper ← step ← main\n");
}

TEST(HangStacks, AmongEqualsTheRankWithoutProgressLongestIsBlamed) {
  std::vector<RankOutcome> ranks = {hung(0, 5.0, "a ← main"), hung(1, 7.0, "a ← main"),
                                    hung(2, 6.0, "a ← main")};
  EXPECT_EQ(hang_culprit(ranks), 1u);
  // A rank that printed no stack is blamed only when none did.
  ranks = {hung(0, 9.0, ""), hung(1, 5.0, "a ← main"), hung(2, 5.0, "a ← main")};
  EXPECT_EQ(hang_culprit(ranks), 1u);
  EXPECT_EQ(format_hung_stacks(ranks),
            "  ranks 1-2: a ← main\n"
            "  rank 0: (no stack printed)\n");
  EXPECT_EQ(hang_culprit({hung(4, 3.0, "")}), 0u);
  EXPECT_EQ(hang_culprit({RankOutcome{}}), std::nullopt);
  EXPECT_EQ(format_hung_stacks({RankOutcome{}}), "");
}

}  // namespace
}  // namespace ddplaunch
