#include "output/router.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "config/launch_error.hpp"
#include "log.hpp"
#include "posix/error.hpp"

namespace ddplaunch {

std::filesystem::path rank_log_dir(const std::string& log_dir, int rank, int round) {
  auto dir = std::filesystem::path(log_dir) / std::to_string(rank);
  return round == 0 ? dir : dir / ("attempt_" + std::to_string(round));
}

void keep_earlier(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return;
  }
  for (int k = 1; k < 100000; ++k) {
    auto kept = path;
    kept += "." + std::to_string(k);
    if (!std::filesystem::exists(kept, ec)) {
      std::filesystem::rename(path, kept, ec);
      return;
    }
  }
}

namespace {
const SystemClock k_steady;
}  // namespace

OutputRouter::OutputRouter(const Config& config, ConsoleSink& console, const Clock* clock)
    : m_config(config),
      m_console(console),
      m_clock(clock != nullptr ? *clock : k_steady),
      m_err_fd(config.merge_stderr ? 1 : 2) {}

void OutputRouter::start(const JobLayout& layout) {
  if (m_log_dir.empty()) {
    m_log_dir = m_config.log_dir;
  }
  const bool filtering =
      !m_config.duplicate_stdout_filters.empty() || !m_config.duplicate_stderr_filters.empty();
  if (m_log_dir.empty() && (m_config.redirects.any() || m_config.tee.any() || filtering)) {
    std::string run_id = layout.run_id;
    std::replace(run_id.begin(), run_id.end(), '/', '_');
    std::string tmpl = "/tmp/ddplaunch-" + run_id + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      posix::throw_errno("mkdtemp " + tmpl);
    }
    m_log_dir = tmpl;
    log::info("{} without --log-dir: writing worker logs under {}",
              filtering ? "--duplicate-*-filters" : "--redirects/--tee", m_log_dir);
  }
  if (filtering) {
    open_filtered(layout.node_rank);
  }
  m_workers.clear();
  m_workers.reserve(static_cast<size_t>(layout.local_world_size));
  for (int lr = 0; lr < layout.local_world_size; ++lr) {
    const int rank = layout.rank_offset + lr;
    LinePrefix::Fields f{rank, lr, layout.node_rank, layout.hostname};
    RankStreams& w =
        *m_workers.emplace_back(std::make_shared<RankStreams>(LinePrefix(m_config.prefix, f)));
    const bool console = m_config.console_allows(rank, lr);
    w.channels[0].to_console = console && !m_config.redirects.selects_stdout(lr);
    w.channels[1].to_console = console && !m_config.redirects.selects_stderr(lr);
    if (m_log_dir.empty()) {
      continue;
    }
    auto dir = rank_log_dir(m_log_dir, rank, layout.round);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    for (int s = 0; s < 2; ++s) {
      auto path = (dir / (s == 0 ? "stdout.log" : "stderr.log")).string();
      keep_earlier(path);
      posix::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!fd) {
        throw LaunchError(k_exit_usage, "--log-dir: cannot write " + path + ": " +
                                            std::strerror(errno) + "; choose a writable directory");
      }
      w.channels[s].file = std::move(fd);
    }
  }
}

// Once per job (appended to across rounds): DIR/node_<N>/filtered_*.log, a
// directory per node so that nodes sharing one --log-dir never collide.
void OutputRouter::open_filtered(int node_rank) {
  const auto dir = std::filesystem::path(m_log_dir) / ("node_" + std::to_string(node_rank));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (int s = 0; s < 2; ++s) {
    if (m_filtered[s] || filters(static_cast<Stream>(s)).empty()) {
      continue;
    }
    const auto path = (dir / (s == 0 ? "filtered_stdout.log" : "filtered_stderr.log")).string();
    keep_earlier(path);
    m_filtered[s] = posix::Fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!m_filtered[s]) {
      throw LaunchError(k_exit_usage, "--duplicate-*-filters: cannot write " + path + ": " +
                                          std::strerror(errno) + "; choose a writable --log-dir");
    }
  }
}

const std::vector<std::string>& OutputRouter::filters(Stream stream) const {
  return stream == Stream::k_out ? m_config.duplicate_stdout_filters
                                 : m_config.duplicate_stderr_filters;
}

OutputRouter::RankStreams& OutputRouter::rank_streams(int local_rank) const {
  return *m_workers.at(static_cast<size_t>(local_rank));
}

bool OutputRouter::all_closed() const {
  // `open` changes only on this thread (on_close).
  return std::none_of(m_workers.begin(), m_workers.end(),
                      [](const auto& w) { return w->channels[0].open || w->channels[1].open; });
}

std::vector<std::string> OutputRouter::stderr_tail(int local_rank) const {
  RankStreams& w = rank_streams(local_rank);
  std::lock_guard lock(w.channels[1].mutex);
  return w.stderr_tail.lines();
}

OutputRouter::Activity OutputRouter::activity(int local_rank) const {
  RankStreams& w = rank_streams(local_rank);
  Activity a;
  for (Channel& c : w.channels) {
    std::lock_guard lock(c.mutex);
    a.lines += c.lines;
    if (c.lines > 0 && (!a.last_at || c.last_at > *a.last_at)) {
      a.last_at = c.last_at;
      a.last_line = c.last_line;
    }
  }
  return a;
}

long long OutputRouter::lines(int local_rank) const {
  RankStreams& w = rank_streams(local_rank);
  long long n = 0;
  for (Channel& c : w.channels) {
    std::lock_guard lock(c.mutex);
    n += c.lines;
  }
  return n;
}

std::optional<Clock::TimePoint> OutputRouter::progress_at(int local_rank) const {
  RankStreams& w = rank_streams(local_rank);
  std::optional<Clock::TimePoint> at;
  for (Channel& c : w.channels) {
    std::lock_guard lock(c.mutex);
    if (c.progress_at && (!at || *c.progress_at > *at)) {
      at = c.progress_at;
    }
  }
  return at;
}

void OutputRouter::keep_stderr_lines(int local_rank, size_t lines) {
  RankStreams& w = rank_streams(local_rank);
  std::lock_guard lock(w.channels[1].mutex);
  w.stderr_tail.grow(lines);
}

OutputRouter::StreamRef OutputRouter::stream_ref(int local_rank, Stream stream) const {
  return StreamRef{m_workers.at(static_cast<size_t>(local_rank)), stream};
}

std::mutex& OutputRouter::mutex(const StreamRef& ref) {
  return ref.rank->channels[static_cast<int>(ref.stream)].mutex;
}

bool OutputRouter::open(const StreamRef& ref) {
  return ref.rank->channels[static_cast<int>(ref.stream)].open;
}

void OutputRouter::take(const StreamRef& ref, std::string_view data, Scratch& scratch) {
  process(*ref.rank, ref.stream, data, scratch);
}

bool OutputRouter::streams_independent() const {
  return !m_filtered[0] && !m_filtered[1];
}

void OutputRouter::flush(int fd, Scratch& scratch) {
  if (!scratch.batch.empty() && m_console_ok[fd].load(std::memory_order_relaxed) &&
      !m_console.write_swap(fd, scratch.batch.buffer(), scratch.batch.data().size())) {
    m_console_ok[fd] = false;  // e.g. `ddplaunch ... | head`: keep running, stop printing
  }
  scratch.batch.clear();
}

void OutputRouter::start_lines(const RankStreams& w, Scratch& scratch) {
  scratch.prefix_text.clear();
  w.prefix.append_to(scratch.prefix_text, std::time(nullptr));
}

void OutputRouter::take_line(RankStreams& w, Stream stream, std::string_view line, LineEnd end,
                             Scratch& scratch) {
  const bool is_err = stream == Stream::k_err;
  if (end == LineEnd::k_return && line.empty()) {
    return;  // "\r" that starts an update: nothing to show yet
  }
  const bool whole = end != LineEnd::k_return && end != LineEnd::k_bare_newline;
  if (end == LineEnd::k_newline || end == LineEnd::k_bare_newline) {
    ++w.channels[static_cast<int>(stream)].lines;  // its '\n' (status's progress events)
  }
  if (is_err && whole) {
    w.stderr_tail.push(line);  // a progress bar's updates are not the tail
  }
  if (const posix::Fd& dup = m_filtered[static_cast<int>(stream)]; dup && whole) {
    const auto& wanted = filters(stream);
    if (std::any_of(wanted.begin(), wanted.end(),
                    [&](const std::string& f) { return line.find(f) != std::string_view::npos; })) {
      posix::write_all(dup.get(), scratch.prefix_text + std::string(line) + "\n");
    }
  }
  if (w.channels[static_cast<int>(stream)].to_console) {
    if (end == LineEnd::k_bare_newline) {
      scratch.batch.add("", "");  // the update above stays, and the next line starts below it
    } else {
      scratch.batch.add(scratch.prefix_text, line, end == LineEnd::k_return ? '\r' : '\n');
    }
    if (scratch.batch.must_flush()) {
      flush(is_err ? m_err_fd : 1, scratch);
    }
  }
}

// The common case of a flood, taken without the splitter: a run of whole
// lines ending in '\n', with no '\r' (no progress bar, no "\r\n") and none
// over the splitter's bound. Each is added as take_line() would add it (with
// --no-prefix the run is one copy); returns what is left for the splitter,
// from the first line that is not plain.
std::string_view OutputRouter::take_plain_lines(RankStreams& w, Stream stream,
                                                std::string_view data, Scratch& scratch) {
  const char* p = data.data();
  const char* last = static_cast<const char*>(memrchr(p, '\n', data.size()));
  if (last == nullptr) {
    return data;
  }
  const char* run_end = last + 1;
  const bool is_err = stream == Stream::k_err;
  const int fd = is_err ? m_err_fd : 1;
  const size_t max_line = w.channels[static_cast<int>(stream)].splitter.max_line();
  const bool raw = scratch.prefix_text.empty() && !is_err;
  // Prefixed stdout (a flood's case): lines found and copied many at a
  // time, stopping at a '\r'; what that cannot take goes the way below, a
  // line at a time. A '\r' is the splitter's (a progress bar, or "\r\n").
  const bool quick = !raw && !is_err && scratch.prefix_text.size() <= 16;
  if (!quick && std::memchr(p, '\r', static_cast<size_t>(run_end - p)) != nullptr) {
    return data;
  }
  const char* raw_from = p;
  if (raw) {
    // Only the bound matters: a window of max_line bytes from a line's start
    // holds a '\n', else that line is too long; then on from the window's
    // last one. One memrchr per max_line bytes, not one memchr per line.
    while (p < run_end) {
      const size_t window = std::min(max_line, static_cast<size_t>(run_end - p));
      const char* nl = static_cast<const char*>(memrchr(p, '\n', window));
      if (nl == nullptr) {
        break;  // the splitter cuts it in pieces
      }
      p = nl + 1;
    }
  }
  char prefix16[16] = {};
  if (quick) {
    std::memcpy(prefix16, scratch.prefix_text.data(), scratch.prefix_text.size());
  }
  const char* const readable_end = data.data() + data.size();
  while (!raw && p < run_end) {
    if (const size_t added = quick ? scratch.batch.add_lines(prefix16, scratch.prefix_text.size(),
                                                             p, run_end, readable_end, max_line)
                                   : 0;
        added > 0) {
      w.channels[static_cast<int>(stream)].lines += static_cast<long long>(added);
      if (scratch.batch.must_flush()) {
        flush(fd, scratch);
      }
      continue;
    }
    const char* nl =
        static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(run_end - p)));
    const auto len = static_cast<size_t>(nl - p);
    if (len >= max_line || (quick && std::memchr(p, '\r', len) != nullptr)) {
      break;  // the splitter cuts it in pieces, or shows its '\r'
    }
    if (is_err) {
      w.stderr_tail.push({p, len});
    }
    ++w.channels[static_cast<int>(stream)].lines;
    scratch.batch.add(scratch.prefix_text, {p, len});
    if (scratch.batch.must_flush()) {
      flush(fd, scratch);
    }
    p = nl + 1;
  }
  if (raw && p > raw_from) {
    // Unprefixed whole lines are their own bytes: handed to the console as
    // they lie in the read buffer (after what was batched before them);
    // the windows above found their ends, not their number.
    w.channels[static_cast<int>(stream)].lines +=
        static_cast<long long>(count_newlines({raw_from, static_cast<size_t>(p - raw_from)}));
    flush(fd, scratch);
    if (m_console_ok[fd].load(std::memory_order_relaxed) &&
        !m_console.write(fd, {raw_from, static_cast<size_t>(p - raw_from)})) {
      m_console_ok[fd] = false;
    }
  }
  return {p, static_cast<size_t>(data.data() + data.size() - p)};
}

void OutputRouter::on_data(int local_rank, Stream stream, std::string_view data) {
  RankStreams& w = rank_streams(local_rank);
  std::lock_guard lock(w.channels[static_cast<int>(stream)].mutex);
  process(w, stream, data, m_scratch);
}

void OutputRouter::note_activity(Channel& c, std::string_view data) const {
  const size_t end = data.rfind('\n');
  if (end == std::string_view::npos) {
    if (data.find('\r') != std::string_view::npos) {
      c.progress_at = m_clock.now();  // a progress bar's update: progress, not a line
    }
    return;
  }
  size_t begin = end == 0 ? std::string_view::npos : data.rfind('\n', end - 1);
  begin = begin == std::string_view::npos ? 0 : begin + 1;
  std::string_view line = data.substr(begin, end - begin);
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
  }
  if (const size_t cr = line.rfind('\r'); cr != std::string_view::npos) {
    line.remove_prefix(cr + 1);  // a progress bar's last state
  }
  if (line.size() > k_activity_line) {
    size_t keep = k_activity_line;
    while (keep > 0 && (static_cast<unsigned char>(line[keep]) >> 6) == 2) {
      --keep;  // a UTF-8 character is kept whole or not at all
    }
    line = line.substr(0, keep);
  }
  c.last_line.assign(line);
  c.last_at = m_clock.now();
  c.progress_at = c.last_at;
}

void OutputRouter::process(RankStreams& w, Stream stream, std::string_view data, Scratch& scratch) {
  Channel& c = w.channels[static_cast<int>(stream)];
  note_activity(c, data);
  if (c.file) {
    posix::write_all(c.file.get(), data);
  }
  if (!c.to_console && stream != Stream::k_err && !m_filtered[static_cast<int>(stream)]) {
    c.lines += static_cast<long long>(count_newlines(data));  // no scan below finds them
  } else {
    start_lines(w, scratch);
    auto take = [&](std::string_view line, LineEnd end) {
      take_line(w, stream, line, end, scratch);
    };
    if (c.to_console && !m_filtered[static_cast<int>(stream)]) {
      if (!c.splitter.at_line_start()) {
        // A read rarely ends on a line's end: the splitter finishes the line
        // it holds, and the whole lines after it take the quick way.
        const void* nl = std::memchr(data.data(), '\n', data.size());
        const size_t head = nl != nullptr ? static_cast<const char*>(nl) - data.data() + 1 : 0;
        c.splitter.feed(data.substr(0, head), take);
        data.remove_prefix(head);
      }
      if (c.splitter.at_line_start()) {
        data = take_plain_lines(w, stream, data, scratch);
      }
    }
    c.splitter.feed(data, take);
    flush(stream == Stream::k_err ? m_err_fd : 1, scratch);
  }
}

void OutputRouter::on_close(int local_rank, Stream stream) {
  RankStreams& w = rank_streams(local_rank);
  Channel& c = w.channels[static_cast<int>(stream)];
  std::lock_guard lock(c.mutex);
  if (!c.open) {
    return;
  }
  c.open = false;  // a reader thread reads it no more
  start_lines(w, m_scratch);
  c.splitter.finish(
      [&](std::string_view line, LineEnd end) { take_line(w, stream, line, end, m_scratch); });
  flush(stream == Stream::k_err ? m_err_fd : 1, m_scratch);
  c.file.close();
}

}  // namespace ddplaunch
