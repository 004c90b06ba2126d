// StreamReaders: flooding streams read on threads of their own, straight
// into the router, with every line whole, each stream's bytes in order, the
// loop still able to read a stream itself, and a stream the router closed
// never read again.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "output/stream_readers.hpp"
#include "posix/fd.hpp"
#include "scratch_dir.hpp"

namespace ddplaunch {
namespace {

using Stream = OutputRouter::Stream;

// The console as the tests see it: what reached each stream, whole writes.
class Capture : public ConsoleSink {
 public:
  bool write(int fd, std::string_view data) override {
    std::lock_guard lock(m_mutex);
    m_shown[fd].append(data);
    return true;
  }
  std::string shown(int fd) {
    std::lock_guard lock(m_mutex);
    return m_shown[fd];
  }

 private:
  std::mutex m_mutex;
  std::map<int, std::string> m_shown;
};

struct Pipe {
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read = posix::Fd(fds[0]);
    write = posix::Fd(fds[1]);
    EXPECT_EQ(::fcntl(read.get(), F_SETFL, O_NONBLOCK), 0);
  }
  posix::Fd read, write;
};

JobLayout layout(int local_world_size) {
  JobLayout l;
  l.local_world_size = local_world_size;
  l.world_size = local_world_size;
  l.hostname = "host";
  return l;
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    ASSERT_GT(n, 0);
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// Waits (bounded) until the threads have listed `count` ended streams.
std::vector<StreamReaders::Slot*> await_ended(StreamReaders& readers, size_t count) {
  std::vector<StreamReaders::Slot*> ended;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ended.size() < count && std::chrono::steady_clock::now() < until) {
    pollfd p{readers.ended_fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      for (auto* slot : readers.take_ended()) {
        ended.push_back(slot);
      }
    }
  }
  return ended;
}

// A router over `ranks` local ranks, capturing the console, and its readers.
struct Rig {
  Rig(int ranks, int threads, const char* prefix = "[rank {rank}]: ")
      : config(configured(prefix)), router(config, console), readers(router, console, threads) {
    start(ranks);
  }
  static Config configured(const char* prefix) {
    Config c;
    c.prefix = prefix;
    return c;
  }
  void start(int ranks) { router.start(layout(ranks)); }
  Config config;
  Capture console;
  OutputRouter router;
  StreamReaders readers;
};

TEST(StreamReaders, FloodingStreamsAreReadOnThreadsWithEveryLineWholeAndInOrder) {
  constexpr int k_workers = 4;
  Rig rig(k_workers, 2);
  auto& [config, console, router, readers] = rig;
  std::vector<Pipe> pipes(k_workers);
  std::vector<StreamReaders::Slot*> slots;
  for (int lr = 0; lr < k_workers; ++lr) {
    auto* slot = readers.adopt(static_cast<uint64_t>(2 * lr), router.stream_ref(lr, Stream::k_out),
                               pipes[lr].read.get());
    ASSERT_NE(slot, nullptr);
    slots.push_back(slot);
    pipes[lr].read.close();  // the thread reads its own copy
  }
  EXPECT_EQ(readers.started(), 2);
  // Each writer writes numbered lines in odd-sized pieces, cutting lines anywhere.
  constexpr int k_lines = 20000;
  std::vector<std::thread> writers;
  for (int lr = 0; lr < k_workers; ++lr) {
    writers.emplace_back([&, lr] {
      std::string all;
      for (int i = 0; i < k_lines; ++i) {
        all += "w" + std::to_string(lr) + " line " + std::to_string(i) + " " +
               std::string(static_cast<size_t>(i % 97), 'x') + "\n";
      }
      for (size_t at = 0; at < all.size();) {
        const size_t n = std::min(all.size() - at, static_cast<size_t>(1 + (at * 7919) % 70000));
        write_all(pipes[lr].write.get(), std::string_view(all).substr(at, n));
        at += n;
      }
      pipes[lr].write.close();
    });
  }
  for (auto& w : writers) {
    w.join();
  }
  const auto ended = await_ended(readers, k_workers);
  ASSERT_EQ(ended.size(), static_cast<size_t>(k_workers));
  readers.stop();
  std::vector<int> next(k_workers, 0);
  std::istringstream shown(console.shown(1));
  for (std::string line; std::getline(shown, line);) {
    // "[rank R]: wR line I xxx": whole, and each rank's lines in order.
    int rank = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d]: ", &rank), 1) << line;
    ASSERT_TRUE(rank >= 0 && rank < k_workers) << line;
    const int i = next[rank]++;
    ASSERT_EQ(line, "[rank " + std::to_string(rank) + "]: w" + std::to_string(rank) + " line " +
                        std::to_string(i) + " " + std::string(static_cast<size_t>(i % 97), 'x'));
  }
  for (int lr = 0; lr < k_workers; ++lr) {
    EXPECT_EQ(next[lr], k_lines) << "rank " << lr;
  }
}

TEST(StreamReaders, TheLoopMayReadAStreamATheadReadsWithoutReorderingIt) {
  Rig rig(1, 1, "");
  auto& [config, console, router, readers] = rig;
  Pipe pipe;
  auto* slot = readers.adopt(0, router.stream_ref(0, Stream::k_out), pipe.read.get());
  ASSERT_NE(slot, nullptr);
  std::string want;
  std::thread writer([&] {
    for (int i = 0; i < 50000; ++i) {
      const std::string line = std::to_string(i) + "\n";
      write_all(pipe.write.get(), line);
    }
    pipe.write.close();
  });
  for (int i = 0; i < 50000; ++i) {
    want += std::to_string(i) + "\n";
  }
  // Meanwhile the loop drains it too, as it does for a worker that ended.
  std::vector<char> buffer(4096);
  int ended_here = 0;
  while (ended_here == 0) {
    const int r = readers.read_now(*slot, buffer.data(), buffer.size());
    if (r < 0) {
      ended_here = 1;
    } else if (r == 0) {
      std::this_thread::yield();
    }
  }
  writer.join();
  readers.stop();
  EXPECT_EQ(console.shown(1), want);
}

TEST(StreamReaders, AStreamTheRouterClosedIsReadNoMore) {
  Rig rig(1, 1);
  auto& [config, console, router, readers] = rig;
  Pipe pipe;
  auto* slot = readers.adopt(1, router.stream_ref(0, Stream::k_err), pipe.read.get());
  ASSERT_NE(slot, nullptr);
  write_all(pipe.write.get(), "before\n");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (console.shown(2).empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(console.shown(2), "[rank 0]: before\n");
  EXPECT_EQ(router.stderr_tail(0), std::vector<std::string>{"before"});
  // The round ends (the agent closes its streams), then a straggler writes.
  router.on_close(0, Stream::k_err);
  write_all(pipe.write.get(), "after the round\n");
  const auto ended = await_ended(readers, 1);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0], slot);
  EXPECT_EQ(ended[0]->tag, 1u);
  // The next round's router state is its own; the old stream's is kept for the thread.
  router.start(layout(1));
  readers.stop();
  EXPECT_EQ(console.shown(2), "[rank 0]: before\n");
  char byte;
  EXPECT_EQ(::read(pipe.read.get(), &byte, 1), 1) << "the straggler's bytes stay unread";
}

// A console that fails as an allocation would.
class Failing : public ConsoleSink {
 public:
  bool write(int, std::string_view) override { throw std::bad_alloc(); }
};

TEST(StreamReaders, AThreadsErrorReachesTheLoopInsteadOfEndingTheProcess) {
  Config config;
  Failing console;
  OutputRouter router(config, console);
  router.start(layout(1));
  StreamReaders readers(router, console, 1);
  Pipe pipe;
  ASSERT_NE(readers.adopt(0, router.stream_ref(0, Stream::k_out), pipe.read.get()), nullptr);
  write_all(pipe.write.get(), "a line\n");
  pollfd p{readers.ended_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 30000), 1);
  EXPECT_THROW(readers.take_ended(), std::runtime_error);
  readers.stop();
}

TEST(StreamReaders, NoThreadsKeepsEveryStreamOnTheLoop) {
  Rig rig(1, 0);
  auto& [config, console, router, readers] = rig;
  Pipe pipe;
  EXPECT_EQ(readers.adopt(0, router.stream_ref(0, Stream::k_out), pipe.read.get()), nullptr);
  EXPECT_EQ(readers.started(), 0);
  EXPECT_GE(StreamReaders::threads_for_this_machine(), 0);
  EXPECT_LE(StreamReaders::threads_for_this_machine(), 4);
}

// The router's quick way for a run of whole lines (take_plain_lines, with
// add_lines for a short prefix) and its splitter show the same bytes however
// the reads cut a stream: "\r\n" endings and a line over the bound in the
// middle of a flood hand the rest of a read to the splitter, and the next
// read takes the quick way again. (A read that ends between the '\r' and
// the '\n' shows the line as a progress update first: not cut there.)
TEST(StreamReaders, TheConsoleShowsTheSameLinesHoweverTheReadsCutTheStream) {
  std::string text;
  for (int i = 0; i < 600; ++i) {
    text += "line " + std::to_string(i) + std::string(static_cast<size_t>(i * 13 % 150), '.');
    text += i % 37 == 5 ? "\r\n" : "\n";
    if (i == 300) {
      text += std::string(LineSplitter::k_default_max_line + 100, 'L') + "\n";
    }
  }
  auto shown = [&](const char* prefix, size_t read_size) {
    Rig rig(1, 0, prefix);
    for (size_t at = 0; at < text.size();) {
      size_t n = std::min(read_size, text.size() - at);
      n += text[at + n - 1] == '\r' ? 1 : 0;
      rig.router.on_data(0, Stream::k_out, std::string_view(text).substr(at, n));
      at += n;
    }
    rig.router.on_close(0, Stream::k_out);
    return rig.console.shown(1);
  };
  for (const char* prefix :
       {"[rank {rank}]: ", "a prefix longer than sixteen bytes {rank}: ", ""}) {
    const std::string whole = shown(prefix, text.size());
    EXPECT_EQ(whole.find('\r'), std::string::npos) << "\"\\r\\n\" ends a line";
    if (std::string_view(prefix) == "[rank {rank}]: ") {
      EXPECT_EQ(whole.substr(0, 17), "[rank 0]: line 0\n");
      EXPECT_NE(whole.find("\n[rank 0]: line 5" + std::string(65, '.') + "\n[rank 0]: line 6"),
                std::string::npos);
      EXPECT_NE(whole.find("\n[rank 0]: " + std::string(LineSplitter::k_default_max_line, 'L') +
                           "\n[rank 0]: " + std::string(100, 'L') + "\n"),
                std::string::npos)
          << "the line over the bound, in two pieces";
      EXPECT_NE(whole.find("\n[rank 0]: line 599...."), std::string::npos);
    }
    for (size_t read_size : {1, 7, 100, 4096, 65539}) {
      EXPECT_EQ(shown(prefix, read_size), whole) << prefix << " " << read_size;
    }
  }
}

// `ddplaunch status`'s progress events: every '\n' a rank wrote, counted by
// whichever scan took its bytes: the prefixed quick path, the splitter (a
// line split across reads, "\r\n", a progress bar), --no-prefix's raw copy,
// stderr, and a stream that goes to a file only (--redirects).
TEST(OutputRouterActivity, EveryNewlineIsCountedOnEveryPathAndTheLastLineKept) {
  std::string flood;
  for (int i = 0; i < 300; ++i) {
    flood += "line " + std::to_string(i) + "\n";
  }
  const std::vector<std::string> reads = {
      flood,       "half a ",  "line\nbar 10%\rbar 20%\r",
      "\n",        "a\r\nb\n", std::string(70000, 'x') + "\nlast one\n",
      "unfinished"};
  const long long newlines = 300 + 1 + 1 + 2 + 2;
  for (const char* prefix : {"[rank {rank}]: ", ""}) {
    for (const bool redirected : {false, true}) {
      for (const Stream stream : {Stream::k_out, Stream::k_err}) {
        Config config = Rig::configured(prefix);
        ScratchDir logs;
        if (redirected) {
          config.log_dir = logs / "logs";
          config.redirects.all = 3;
        }
        Capture console;
        OutputRouter router(config, console);
        router.start(layout(1));
        for (const auto& r : reads) {
          router.on_data(0, stream, r);
        }
        const auto a = router.activity(0);
        EXPECT_EQ(a.lines, newlines) << "prefix '" << prefix << "' redirected " << redirected
                                     << " stream " << static_cast<int>(stream);
        EXPECT_EQ(a.last_line, "last one");
      }
    }
  }
}

}  // namespace
}  // namespace ddplaunch
