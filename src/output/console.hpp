// ConsoleWriter: the launcher's own stdout and stderr. While nothing is
// queued, the pushing thread writes to a pipe, socket or /dev/null itself
// (a write that cannot block); what would block, and everything for a
// terminal or a file, goes to a thread of its own, started with the first
// such item. So a console that does not keep up (a full pipe nobody reads, a
// terminal stopped with Ctrl-S, an O_NONBLOCK stdout that says EAGAIN) delays
// what is shown but never the event loop: supervision, signals and heartbeats
// go on. When stdout and stderr are the same file (a terminal, `2>&1`) one
// queue keeps the order in which lines were taken; otherwise each has its
// own, so a stdout nobody reads never holds back the failure report on
// stderr. Worker output beyond a backlog is dropped whole and counted, and a
// notice says how much once the console catches up; the launcher's own
// messages (its log, the failure report) are always kept. While a writer
// exists, the log (spdlog) goes through it too.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>

#include "output/router.hpp"

namespace ddplaunch {

class ConsoleWriter : public ConsoleSink {
 public:
  struct Limits {
    // Worker output queued and not yet written at which the launcher stops
    // reading the workers' pipes for that stream (they wait, as they would
    // writing to that console themselves) until half of it is written.
    size_t backpressure_at = 8 << 20;
    // What may still arrive past that (a read per stream, the last bytes of
    // workers that ended) is kept up to this, then dropped with a notice.
    size_t drop_beyond = 64 << 20;
    // At the end, how long the console may accept nothing before the rest
    // is given up and the launcher exits anyway.
    std::chrono::milliseconds exit_stall = std::chrono::seconds(10);
  };

  // `out` and `err` stand for the launcher's stdout and stderr (fds 1 and 2;
  // others in tests). Callers still name the streams 1 and 2.
  explicit ConsoleWriter(Limits limits, int out = 1, int err = 2);
  ConsoleWriter() : ConsoleWriter(Limits{}) {}
  // finish({}) unless finish() ran.
  ~ConsoleWriter() override;
  // Drains what is queued (bounded by exit_stall without progress) and routes
  // the log back to stderr. `stop` (may be empty) is asked every 100 ms while
  // the console takes nothing it is given: true gives the rest up at once (a
  // stop signal during the exit drain). Returns false when `stop` ended it.
  // Once; later writes go nowhere.
  bool finish(const std::function<bool()>& stop);
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  // Worker output for fd 1 or 2; false once that stream is gone (EPIPE).
  bool write(int fd, std::string_view data) override;
  // The same for data[0, size), queueing `data`'s buffer itself (when it
  // cannot be written at once) and leaving a spare one.
  bool write_swap(int fd, std::string& data, size_t size) override;
  // The launcher's own text: never dropped.
  void write_own(int fd, std::string_view data);
  // Whether stream `fd` holds backpressure_at or more: stop reading the
  // workers' pipes for it until wake_fd() is readable.
  bool backlogged(int fd) override;
  // An eventfd, readable when a backlogged stream has room again; the reader
  // resets it with read_wake().
  int wake_fd() const;
  void read_wake();

 private:
  struct Lane;
  bool m_finished = false;
  struct State;
  std::shared_ptr<State> m_state;  // shared with the thread, which may outlive us
};

}  // namespace ddplaunch
