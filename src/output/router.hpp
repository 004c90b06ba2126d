// OutputRouter: where the workers' bytes go. Each worker's stdout and stderr
// are cut into whole lines, prefixed, and batched to the console (through a
// ConsoleSink, so tests can capture it), copied raw to --log-dir files, and
// the last stderr lines of each worker are kept for the failure report; lines
// matching --duplicate-stdout/stderr-filters are also copied, prefixed, to the
// node's filtered_stdout.log/filtered_stderr.log.
// Streams are numbered by local rank; the router owns the log files it opens
// and nothing else. The agent's thread drives it; a stream handed to a reader
// thread (output/stream_readers.hpp) is taken there under that stream's
// mutex, which every call about that stream here takes too.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "output/lines.hpp"
#include "posix/clock.hpp"
#include "posix/fd.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// The launcher's own stdout (1) and stderr (2).
class ConsoleSink {
 public:
  virtual ~ConsoleSink() = default;
  // Writes all of `data`; false when the stream is gone (a closed pipe).
  virtual bool write(int fd, std::string_view data) = 0;
  // The same for the first `size` bytes of a buffer the sink may keep as it
  // is (no copy), leaving another in its place; afterwards `data` is
  // scratch, of any size and contents.
  virtual bool write_swap(int fd, std::string& data, size_t size) {
    return write(fd, std::string_view(data).substr(0, size));
  }
  // Whether so much of stream `fd` waits to be shown that its readers
  // should stop reading the workers until there is room.
  virtual bool backlogged(int /*fd*/) { return false; }
};

// Where rank `rank`'s files go in round `round` under `log_dir`: DIR/RANK
// for the first round, DIR/RANK/attempt_N for round N (restart N, unless an
// elastic job regrouped).
std::filesystem::path rank_log_dir(const std::string& log_dir, int rank, int round);

// An earlier job's file at `path` is kept: renamed to path.1 (or .2, ...,
// the first free), so a rerun never overwrites it.
void keep_earlier(const std::filesystem::path& path);

class OutputRouter {
 public:
  enum class Stream { k_out = 0, k_err = 1 };

  // What a thread taking lines needs of its own: the prefix being used,
  // the lines gathered for one console write.
  struct Scratch {
    std::string prefix_text;
    LineBatch batch;
  };
  struct RankStreams;
  // One stream of one round's rank, as a reader thread holds it: it keeps the
  // stream's state alive after a later round replaced it.
  struct StreamRef {
    std::shared_ptr<RankStreams> rank;
    Stream stream = Stream::k_out;
  };

  // `clock` (which must outlive it) times each rank's last line: the
  // Agent's, so that its hang clock and `ddplaunch status` read one clock
  // (null: the steady clock).
  OutputRouter(const Config& config, ConsoleSink& console, const Clock* clock = nullptr);

  // Prepares one stream pair per local rank of `layout` and opens the log
  // files (before any worker starts, so a bad --log-dir stops nothing); once
  // per round (layout.round).
  // Throws LaunchError (exit 2) for a log file that cannot be written.
  void start(const JobLayout& layout);

  void on_data(int local_rank, Stream stream, std::string_view data);
  // End of a stream: its unfinished last line is printed. Idempotent.
  void on_close(int local_rank, Stream stream);
  bool all_closed() const;

  // For reading a stream on another thread: its handle, the mutex held while
  // reading and taking its bytes, and the taking itself (under that mutex,
  // with the thread's own scratch). Once the stream is closed (on_close;
  // open() is false) nothing more may be read from it.
  StreamRef stream_ref(int local_rank, Stream stream) const;
  static std::mutex& mutex(const StreamRef& ref);
  static bool open(const StreamRef& ref);  // under mutex(ref)
  void take(const StreamRef& ref, std::string_view data, Scratch& scratch);
  // Whether taking a stream needs only the router (no --duplicate-*-filters
  // file, which all streams share): then it may be read on another thread.
  bool streams_independent() const;

  // The last lines of a worker's stderr, oldest first.
  std::vector<std::string> stderr_tail(int local_rank) const;
  // From now on the tail keeps up to `lines` lines: room for the stacks a
  // hung rank is about to print (a traceback of every thread).
  void keep_stderr_lines(int local_rank, size_t lines);
  // A rank's output so far, for `ddplaunch status`: its lines (both
  // streams, whole or not), its last whole line of either, and when that
  // came (nullopt: no line yet).
  struct Activity {
    long long lines = 0;
    std::string last_line;
    std::optional<Clock::TimePoint> last_at;  // on the router's clock
  };
  static constexpr size_t k_activity_line = 240;
  Activity activity(int local_rank) const;
  // The cheap parts of it, for the hang watch and --restart-min-progress:
  // the rank's lines so far this round, and when it last showed progress (a
  // whole line, or a progress bar's '\r' update; nullopt: not yet).
  long long lines(int local_rank) const;
  std::optional<Clock::TimePoint> progress_at(int local_rank) const;
  // The directory the log files go to ("" when none).
  const std::string& log_dir() const { return m_log_dir; }

 private:
  struct Channel {
    std::mutex mutex;  // held by whoever reads this stream and takes its bytes
    bool open = true;
    bool to_console = true;
    posix::Fd file;  // --log-dir copy; invalid when not logging
    LineSplitter splitter;
    // What `ddplaunch status` shows: the lines seen, the last whole one
    // (cut to k_activity_line bytes) and when it came.
    long long lines = 0;
    std::string last_line;
    Clock::TimePoint last_at{};
    std::optional<Clock::TimePoint> progress_at;  // a line or a '\r' update
  };
  RankStreams& rank_streams(int local_rank) const;
  // Keeps `data`'s last whole line (a progress bar's last state) in `c`,
  // for activity(): a search back from its end. The lines are counted by
  // the scans that already find them (take_line(), take_plain_lines()), and
  // by count_newlines() where nothing scans the bytes.
  void note_activity(Channel& c, std::string_view data) const;
  void process(RankStreams& w, Stream stream, std::string_view data, Scratch& scratch);
  void start_lines(const RankStreams& w, Scratch& scratch);
  void take_line(RankStreams& w, Stream stream, std::string_view line, LineEnd end,
                 Scratch& scratch);
  std::string_view take_plain_lines(RankStreams& w, Stream stream, std::string_view data,
                                    Scratch& scratch);
  void flush(int fd, Scratch& scratch);
  void open_filtered(int node_rank);
  const std::vector<std::string>& filters(Stream stream) const;

  const Config& m_config;
  ConsoleSink& m_console;
  const Clock& m_clock;
  std::string m_log_dir;
  std::vector<std::shared_ptr<RankStreams>> m_workers;
  // --duplicate-stdout/stderr-filters: the node's filtered_{stdout,stderr}.log.
  posix::Fd m_filtered[2];
  Scratch m_scratch;  // the agent thread's
  std::atomic<bool> m_console_ok[3] = {true, true, true};
  int m_err_fd = 2;  // where workers' stderr lines go: 1 with --merge-stderr-to-stdout
};

struct OutputRouter::RankStreams {
  explicit RankStreams(LinePrefix p) : prefix(std::move(p)) {}
  LinePrefix prefix;
  TailBuffer stderr_tail;  // under channels[1].mutex
  Channel channels[2];
};

}  // namespace ddplaunch
