// ConsoleWriter over pipes standing for the launcher's stdout and stderr.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "output/console.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {
namespace {

std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) {
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

const std::string k_line(99, 'x');

TEST(Console, BackloggedUntilTheReaderCatchesUpThenWakes) {
  auto out = posix::make_pipe();
  auto err = posix::make_pipe();
  std::string shown;
  std::thread reader;
  {
    ConsoleWriter console({.backpressure_at = 1 << 20, .drop_beyond = 8 << 20}, out.write.get(),
                          err.write.get());
    // Nobody reads: 64 KiB fit in the pipe, the rest queues.
    while (!console.backlogged(1)) {
      ASSERT_TRUE(console.write(1, k_line + "\n"));
    }
    EXPECT_FALSE(console.backlogged(2)) << "stderr has its own queue";
    EXPECT_FALSE(readable(console.wake_fd(), 0));
    // The reader catches up: the writer says there is room again.
    fcntl(out.read.get(), F_SETFL, O_NONBLOCK);
    while (!readable(console.wake_fd(), 0)) {
      if (readable(out.read.get(), 10)) {
        char buf[65536];
        ssize_t n = ::read(out.read.get(), buf, sizeof(buf));
        shown.append(buf, static_cast<size_t>(std::max<ssize_t>(n, 0)));
      }
    }
    console.read_wake();
    EXPECT_FALSE(console.backlogged(1));
    fcntl(out.read.get(), F_SETFL, 0);
    reader = std::thread([&] { shown += read_all(out.read.get()); });
  }  // drains into the reader
  out.write.close();
  reader.join();
  EXPECT_EQ(count(shown, "\n"), count(shown, k_line + "\n")) << "whole lines only";
  EXPECT_EQ(shown.find("did not keep up"), std::string::npos) << "nothing was dropped";
}

TEST(Console, BeyondTheHardLimitWorkerOutputIsDroppedAndCounted) {
  auto out = posix::make_pipe();
  constexpr size_t k_lines = 20000;  // 2 MB, four times drop_beyond
  std::string shown;
  std::thread reader;
  {
    ConsoleWriter console({.backpressure_at = 64 << 10, .drop_beyond = 512 << 10}, out.write.get(),
                          out.write.get());
    for (size_t i = 0; i < k_lines; ++i) {
      console.write(1, k_line + "\n");  // a caller that ignores backlogged()
    }
    console.write_own(2, "ddplaunch: error: the launcher's own line is kept\n");
    reader = std::thread([&] { shown = read_all(out.read.get()); });
  }  // drains into the reader
  out.write.close();
  reader.join();
  const auto at = shown.find("did not keep up: ");
  ASSERT_NE(at, std::string::npos);
  const size_t dropped = std::stoul(shown.substr(at + 17));
  EXPECT_EQ(count(shown, k_line + "\n") + dropped, k_lines) << "every line is shown or counted";
  EXPECT_GT(dropped, 0u);
  EXPECT_NE(shown.find("the launcher's own line is kept"), std::string::npos);
}

TEST(Console, AClosedReaderEndsTheStreamNotTheLauncher) {
  auto out = posix::make_pipe();
  auto err = posix::make_pipe();
  out.read.close();          // `ddplaunch ... | head` after head exited
  signal(SIGPIPE, SIG_IGN);  // as the launcher does
  ConsoleWriter console({}, out.write.get(), err.write.get());
  bool open = true;
  for (int i = 0; i < 100000 && open; ++i) {
    open = console.write(1, k_line + "\n");
  }
  EXPECT_FALSE(open);
}

// Over a pipe the caller writes itself while nothing is queued, and queues
// what does not fit: a slow reader still gets every line once, whole and in
// order, whichever way each went.
TEST(Console, DirectAndQueuedWritesKeepTheOrderOfLines) {
  auto out = posix::make_pipe();
  std::string shown;
  std::thread reader([&] {
    char buf[4096];
    for (ssize_t n; (n = ::read(out.read.get(), buf, sizeof(buf))) > 0;) {
      shown.append(buf, static_cast<size_t>(n));
      if (shown.size() % 7 == 0) {
        std::this_thread::yield();
      }
    }
  });
  constexpr int k_batches = 400;
  {
    ConsoleWriter console({}, out.write.get(), out.write.get());
    std::string batch;
    for (int i = 0; i < k_batches; ++i) {
      // Batches of 1 to 40 lines: some fit the pipe, some only in part.
      for (int line = 0; line <= i % 40; ++line) {
        batch +=
            std::to_string(i) + ":" + std::to_string(line) + ":" + std::string(200, 'y') + "\n";
      }
      // Only the first bytes count: what follows them is a batch's unused room.
      const size_t size = batch.size();
      batch += "unused room, never shown\n";
      ASSERT_TRUE(console.write_swap(1, batch, size));
      batch.clear();  // scratch afterwards: the caller empties it
    }
  }  // drains
  out.write.close();
  reader.join();
  size_t at = 0;
  for (int i = 0; i < k_batches; ++i) {
    for (int line = 0; line <= i % 40; ++line) {
      const std::string want =
          std::to_string(i) + ":" + std::to_string(line) + ":" + std::string(200, 'y') + "\n";
      ASSERT_EQ(shown.compare(at, want.size(), want), 0) << "batch " << i << " line " << line;
      at += want.size();
    }
  }
  EXPECT_EQ(at, shown.size());
}

}  // namespace
}  // namespace ddplaunch
