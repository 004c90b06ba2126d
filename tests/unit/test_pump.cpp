// StreamPump: real pipes on a real EventLoop, a sink that records what it
// is told and a console whose backlog the test sets. No thread: the reader
// threads are never asked for (no router).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <map>
#include <string>
#include <vector>

#include "output/pump.hpp"

namespace ddplaunch {
namespace {

constexpr uint64_t k_base = posix::EventLoop::k_owner_span << 3;  // a multiple of the span

struct Console : ConsoleSink {
  bool behind = false;
  bool write(int, std::string_view) override { return true; }
  bool backlogged(int fd) override { return behind && fd == 1; }
};

struct Sink : StreamPump::Sink {
  std::map<StreamPump::Id, std::string> bytes;
  std::vector<std::string> events;
  void on_bytes(StreamPump::Id id, std::string_view data) override { bytes[id] += data; }
  void on_closed(StreamPump::Id id) override { events.push_back("closed " + std::to_string(id)); }
  void on_paused(StreamPump::Id id, bool paused) override {
    events.push_back((paused ? "paused " : "resumed ") + std::to_string(id));
  }
};

struct Pumping {
  posix::EventLoop loop;
  Console console;
  Sink sink;
  StreamPump pump{loop, k_base, console, sink};
  std::vector<posix::Fd> writers;

  // A new stream `id`; the test writes its pipe through writers[id].
  void add(StreamPump::Id id, int console_fd) {
    auto p = posix::make_pipe();
    posix::set_nonblocking(p.read.get());
    pump.add(id, std::move(p.read), console_fd);
    writers.resize(std::max<size_t>(writers.size(), id + 1));
    writers[id] = std::move(p.write);
  }
  void write(StreamPump::Id id, const std::string& text) {
    ASSERT_EQ(::write(writers[id].get(), text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
  }
  // Hands what is ready to the pump until nothing is.
  void poll() {
    for (int round = 0; round < 1000; ++round) {
      const auto ready = loop.wait(std::chrono::steady_clock::now());
      if (ready.empty()) {
        return;
      }
      for (const auto& r : ready) {
        ASSERT_TRUE(pump.owns(r.tag));
        pump.on_ready(r.tag);
      }
    }
  }
};

TEST(StreamPump, BytesArriveInOrderAndAnEndIsToldOnce) {
  Pumping p;
  p.add(0, 1);
  p.add(1, 2);
  p.write(0, "one ");
  p.write(1, "err");
  p.poll();
  p.write(0, "two");
  p.writers[0].close();
  p.poll();
  EXPECT_EQ(p.sink.bytes[0], "one two");
  EXPECT_EQ(p.sink.bytes[1], "err");
  EXPECT_EQ(p.sink.events, std::vector<std::string>{"closed 0"});
  EXPECT_FALSE(p.pump.is_open(0));
  EXPECT_TRUE(p.pump.is_open(1));
  EXPECT_FALSE(p.pump.read(0));  // a closed stream reads nothing, tells nothing
  EXPECT_EQ(p.sink.events.size(), 1U);
}

TEST(StreamPump, TagsAreItsOwnOnly) {
  Pumping p;
  EXPECT_TRUE(p.pump.owns(k_base | 7));
  EXPECT_TRUE(p.pump.owns(k_base | StreamPump::k_readers_id));
  EXPECT_FALSE(p.pump.owns(7));
  EXPECT_FALSE(p.pump.owns(k_base << 1));
  EXPECT_FALSE(p.pump.owns((k_base << 1) | k_base));
}

TEST(StreamPump, ABackloggedConsolePausesItsStreamsOnceUntilThereIsRoom) {
  Pumping p;
  p.add(0, 1);
  p.add(1, 2);
  p.console.behind = true;  // stdout only
  p.write(0, "a");
  p.write(1, "b");
  p.poll();
  p.write(0, "c");
  p.write(1, "d");
  p.poll();
  EXPECT_EQ(p.sink.bytes[0], "a");  // paused after its first read
  EXPECT_EQ(p.sink.bytes[1], "bd");
  EXPECT_TRUE(p.pump.is_paused(0));
  p.pump.on_console_room();  // still behind: stays paused
  p.poll();
  EXPECT_EQ(p.sink.bytes[0], "a");
  p.console.behind = false;
  p.pump.on_console_room();
  p.poll();
  EXPECT_EQ(p.sink.bytes[0], "ac");
  EXPECT_EQ(p.sink.events, (std::vector<std::string>{"paused 0", "resumed 0"}));
}

TEST(StreamPump, AProgressPipeIsNeverPaused) {
  Pumping p;
  p.add(2, 0);
  p.console.behind = true;
  p.write(2, "x");
  p.poll();
  p.write(2, "y");
  p.poll();
  EXPECT_EQ(p.sink.bytes[2], "xy");
  EXPECT_TRUE(p.sink.events.empty());
}

TEST(StreamPump, ReadTakesAPausedStreamsLastBytesAndItsEnd) {
  Pumping p;
  p.add(0, 1);
  p.console.behind = true;
  p.write(0, "a");
  p.poll();
  p.write(0, "b");
  p.writers[0].close();
  // As at a child's exit: read until nothing more is there.
  while (p.pump.read(0)) {
  }
  EXPECT_EQ(p.sink.bytes[0], "ab");
  EXPECT_EQ(p.sink.events, (std::vector<std::string>{"paused 0", "resumed 0", "closed 0"}));
}

TEST(StreamPump, OnceBoundedNothingPausesAndPausedStreamsResume) {
  Pumping p;
  p.add(0, 1);
  p.console.behind = true;
  p.write(0, "a");
  p.poll();
  EXPECT_TRUE(p.pump.is_paused(0));
  p.pump.set_bounded(true);  // the children ended
  p.write(0, "b");
  p.poll();
  p.write(0, "c");
  p.poll();
  EXPECT_EQ(p.sink.bytes[0], "abc");
  EXPECT_FALSE(p.pump.is_paused(0));
}

TEST(StreamPump, AFullPipeIsEnlarged) {
  Pumping p;
  p.add(0, 1);
  const std::string flood(StreamPump::k_pipe_full_at, 'x');  // fills a default pipe
  p.write(0, flood);
  p.poll();
  EXPECT_EQ(p.sink.bytes[0].size(), flood.size());
  EXPECT_EQ(::fcntl(p.writers[0].get(), F_GETPIPE_SZ),
            static_cast<int>(StreamReaders::k_pipe_bytes));
}

TEST(StreamPump, ClearClosesEveryStreamWithoutTellingAndIdsAreUsedAgain) {
  Pumping p;
  p.add(0, 1);
  p.add(1, 2);
  p.console.behind = true;
  p.write(0, "a");
  p.poll();  // 0 paused
  p.pump.clear();
  EXPECT_FALSE(p.pump.is_open(0));
  EXPECT_FALSE(p.pump.is_open(1));
  EXPECT_EQ(p.sink.events, std::vector<std::string>{"paused 0"});
  // Its write end sees the read end gone.
  ::signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(::write(p.writers[1].get(), "x", 1), -1);
  p.console.behind = false;
  p.add(0, 1);  // a new round's
  p.write(0, "new");
  p.poll();
  EXPECT_EQ(p.sink.bytes[0], "anew");
}

}  // namespace
}  // namespace ddplaunch
