// StreamReaders: reader threads for the workers' streams that flood. The
// loop's StreamPump reads every pipe at first; a stream that fills its pipe (a
// worker writing faster than one thread copies out of the kernel) is handed
// to one of these threads, which reads it, cuts its lines and writes them to
// the console from then on. Copying out of the pipes is most of the cost of a
// flood, so several threads take it where one loop could not keep up with
// several workers; a job that prints little never starts one.
//
// A thread reads a stream of its own copy of the pipe's fd (dup), under the
// router's mutex for that stream, so the loop may read it too (draining an
// ended worker's pipes before its failure is reported: read_now()), and a
// stream the router closed (a round's end) is read no more. A stream that
// ends on a thread is listed for the loop (ended_fd(), take_ended()), which
// closes its own fd and tells its sink. While the console is behind, a
// thread stops reading that stream (its worker waits, as it would writing to
// the console itself) until there is room, unless the workers have ended.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "output/router.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

class StreamReaders {
  struct Thread;

 public:
  using Stream = OutputRouter::Stream;

  // A flooding stream's pipe (F_SETPIPE_SZ) and one read of it: a full pipe
  // is one read and one wake-up of its writer. 128 KiB, not larger: the
  // pipe's pages and the buffer it is read into then stay in the CPU's cache
  // (512 KiB of L2 a core here) beside the batch the lines go to. On 2 CPUs,
  // 4 flooding workers, paired runs: 256 KiB took 1.25x as long as 128 KiB
  // prefixed and 1.35x without prefixes, with about 1.3x the system time
  // (the kernel's copy out of the pipe, missing the cache); 64 KiB pipes
  // took 1.14x (a wake-up per 64 KiB); 128 KiB pipes read 64 KiB at a
  // time, 1.07x.
  static constexpr size_t k_pipe_bytes = 128 * 1024;

  // One handed-over stream. Kept until the StreamReaders go, so a thread
  // that was told of it just before it ended finds it still there.
  struct Slot {
    uint64_t tag = 0;  // the caller's name for it
    OutputRouter::StreamRef ref;
    posix::Fd fd;       // the thread's copy of the pipe; closed when done (under the mutex)
    bool done = false;  // under the router's mutex for ref
    bool parked = false;
    Thread* thread = nullptr;
    // The console stream its lines go to: 1 or 2.
    int console_fd() const { return ref.stream == Stream::k_err ? 2 : 1; }
  };

  // `threads`: how many reader threads at most (4 at most); 0 keeps every
  // stream on the caller's loop (adopt() returns null).
  StreamReaders(OutputRouter& router, ConsoleSink& console, int threads);
  ~StreamReaders();
  StreamReaders(const StreamReaders&) = delete;
  StreamReaders& operator=(const StreamReaders&) = delete;

  // How many reader threads this machine gets: 4 (one per flooding stream,
  // beyond that shared); none when this process may run on one CPU only,
  // where a thread would only take turns with the loop.
  static int threads_for_this_machine();

  // Hands the stream `ref` (whose pipe `fd` the caller keeps, and no longer
  // polls) to a reader thread. Null when there are none, or dup failed: the
  // caller goes on reading it.
  Slot* adopt(uint64_t tag, OutputRouter::StreamRef ref, int fd);
  // On the caller's thread: one read of `slot`'s pipe into `buffer`, taken
  // as the thread would. 1: read something; 0: nothing there now; -1: the
  // stream ended (EOF) or was closed: the caller closes its fd.
  int read_now(Slot& slot, char* buffer, size_t size);
  // Readable when streams ended on a thread; take_ended() lists them once.
  // A thread that failed (it could not allocate) ends its streams and
  // take_ended() throws its error on the caller's thread, as the loop's own
  // reading would have.
  int ended_fd() const { return m_ended_fd.get(); }
  std::vector<Slot*> take_ended();
  // The workers ended: what is left in the pipes is bounded; read it all
  // without waiting for the console.
  void set_unbounded() { m_unbounded.store(true); }
  // Stops and joins the threads (what they have not read stays unread).
  void stop();
  // Threads started so far.
  int started() const { return static_cast<int>(m_threads.size()); }

 private:
  void run(Thread& thread);
  // Under the slot's mutex: one read, taken. 1: bytes; 0: none now; -1: it ended.
  int pump(Slot& slot, char* buffer, size_t size, OutputRouter::Scratch& scratch);
  void end(Slot& slot);  // under the slot's mutex
  void post_ended(Slot& slot);

  OutputRouter& m_router;
  ConsoleSink& m_console;  // asked whether it is backlogged
  const int m_max_threads;
  std::vector<std::unique_ptr<Thread>> m_threads;
  std::deque<Slot> m_slots;
  size_t m_next = 0;  // the thread the next stream goes to
  std::atomic<bool> m_unbounded{false};
  std::atomic<bool> m_stopping{false};
  OutputRouter::Scratch m_scratch;  // read_now()'s
  posix::Fd m_ended_fd;             // eventfd
  std::mutex m_ended_mutex;
  std::vector<Slot*> m_ended;  // under m_ended_mutex
  std::string m_failure;       // under m_ended_mutex: a thread's error
};

}  // namespace ddplaunch
