// OutputRouter: where the workers' bytes go. Each worker's stdout and stderr
// are cut into whole lines, prefixed, and batched to the console (through a
// ConsoleSink, so tests can capture it), copied raw to --log-dir files, and
// the last stderr lines of each worker are kept for the failure report; lines
// matching --duplicate-stdout/stderr-filters are also copied, prefixed, to the
// node's filtered_stdout.log/filtered_stderr.log.
// Streams are numbered by local rank; the router owns the log files it opens
// and nothing else. Not thread-safe: the agent's one thread drives it.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "output/lines.hpp"
#include "posix/fd.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// The launcher's own stdout (1) and stderr (2).
class ConsoleSink {
 public:
  virtual ~ConsoleSink() = default;
  // Writes all of `data`; false when the stream is gone (a closed pipe).
  virtual bool write(int fd, std::string_view data) = 0;
  // The same for a buffer the sink may keep as it is (no copy), leaving
  // another in its place; afterwards `data` is scratch, of any contents.
  virtual bool write_swap(int fd, std::string& data) {
    const bool ok = write(fd, data);
    data.clear();
    return ok;
  }
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

  OutputRouter(const Config& config, ConsoleSink& console);

  // Prepares one stream pair per local rank of `layout` and opens the log
  // files (before any worker starts, so a bad --log-dir stops nothing); once
  // per round (layout.round).
  // Throws LaunchError (exit 2) for a log file that cannot be written.
  void start(const JobLayout& layout);

  void on_data(int local_rank, Stream stream, std::string_view data);
  // End of a stream: its unfinished last line is printed. Idempotent.
  void on_close(int local_rank, Stream stream);
  bool all_closed() const;

  // The last lines of a worker's stderr, oldest first.
  std::vector<std::string> stderr_tail(int local_rank) const;
  // The directory the log files go to ("" when none).
  const std::string& log_dir() const { return m_log_dir; }

 private:
  struct Channel {
    bool open = true;
    bool to_console = true;
    posix::Fd file;  // --log-dir copy; invalid when not logging
    LineSplitter splitter;
  };
  struct RankStreams {
    explicit RankStreams(LinePrefix p) : prefix(std::move(p)) {}
    LinePrefix prefix;
    TailBuffer stderr_tail;
    Channel channels[2];
  };
  Channel& channel(int local_rank, Stream stream);
  void start_lines(const RankStreams& w);
  void take_line(RankStreams& w, Stream stream, std::string_view line, LineEnd end);
  std::string_view take_plain_lines(RankStreams& w, Stream stream, std::string_view data);
  void flush(int fd);
  void open_filtered(int node_rank);
  const std::vector<std::string>& filters(Stream stream) const;

  const Config& m_config;
  ConsoleSink& m_console;
  std::string m_log_dir;
  std::vector<RankStreams> m_workers;
  // --duplicate-stdout/stderr-filters: the node's filtered_{stdout,stderr}.log.
  posix::Fd m_filtered[2];
  std::string m_prefix_text;  // the prefix for the lines being taken
  LineBatch m_batch;
  bool m_console_ok[3] = {true, true, true};
};

}  // namespace ddplaunch
