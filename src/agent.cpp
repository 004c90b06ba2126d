#include "ddplaunch/agent.hpp"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "ddplaunch/output.hpp"
#include "ddplaunch/process.hpp"
#include "ddplaunch/supervisor.hpp"
#include "log.hpp"
#include "posix/error.hpp"
#include "posix/fd.hpp"
#include "posix/signals.hpp"

namespace ddplaunch {

namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr size_t k_read_chunk = 64 * 1024;

// This program image's peak resident set (VmHWM). getrusage's ru_maxrss is not
// it: that also keeps the peak of the image before execve, which for a
// launcher started by Python is Python's whole RSS, shared by the fork.
long peak_rss_kib() {
  char buf[4096];
  posix::Fd fd(open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  ssize_t n = fd ? read(fd.get(), buf, sizeof(buf) - 1) : -1;
  if (n > 0) {
    buf[n] = '\0';
    if (const char* hwm = std::strstr(buf, "VmHWM:")) {
      return std::strtol(hwm + 6, nullptr, 10);
    }
  }
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// How long to wait for output pipes to close after every worker has ended.
constexpr auto k_drain_timeout = std::chrono::seconds(2);

double wall_now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One of a worker's output pipes.
struct Stream {
  posix::Fd fd;
  int worker = 0;  // index into workers
  bool is_err = false;
  bool to_console = true;
  posix::Fd file;  // --log-dir copy; invalid when not logging
  LineSplitter splitter;
};

struct Worker {
  const WorkerSpec* spec = nullptr;
  pid_t pid = -1;
  double start_time = 0;
  double end_time = 0;
  LinePrefix prefix;
  TailBuffer stderr_tail;
  Worker(const WorkerSpec* s, LinePrefix p) : spec(s), prefix(std::move(p)) {}
};

}  // namespace

struct Agent::Impl {
  const Config& config;
  Plan plan;
  JobLink* link;
  std::vector<Worker> workers;
  std::vector<Stream> streams;
  std::unordered_map<pid_t, int> worker_by_pid;
  std::optional<Supervisor> supervisor;
  std::optional<JobVerdict> verdict;
  posix::Fd epoll;
  std::array<char, k_read_chunk> buffer;
  std::string prefix_text;  // the prefix for the lines being taken
  LineBatch batch;
  bool console_ok[3] = {true, true, true};
  double start_time = 0;
  std::string log_dir;

  Impl(const Config& c, Plan p, JobLink* l) : config(c), plan(std::move(p)), link(l) {}

  void watch(int fd, uint64_t tag) {
    epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      posix::throw_errno("epoll_ctl");
    }
  }

  void setup_log_dir();
  void start_workers();
  enum class ReadResult { k_data, k_empty, k_eof };
  ReadResult read_stream(size_t index);
  void close_stream(size_t index);
  // One stream's complete lines: start_lines() sets the prefix (its {time} is
  // now); take_line() keeps a stderr line for the failure report and batches
  // it for the console; flush_console() writes the batch to fd 1 or 2.
  void start_lines(const Stream& s);
  void take_line(const Stream& s, std::string_view line);
  void flush_console(int fd);
  void drain_worker(int worker);
  void apply(const Supervisor::Actions& actions);
  void handle_exit(pid_t pid, const ExitInfo& info);
  RankOutcome outcome(int worker) const;
  JobSummary run();
};

// Tags in epoll data: streams are their index; these sit above any index.
constexpr uint64_t k_tag_signals = 1ULL << 40;
constexpr uint64_t k_tag_link = 1ULL << 41;

void Agent::Impl::setup_log_dir() {
  log_dir = config.log_dir;
  if (log_dir.empty() && (config.redirects.any() || config.tee.any())) {
    std::string run_id = plan.layout.run_id;
    std::replace(run_id.begin(), run_id.end(), '/', '_');
    std::string tmpl = "/tmp/ddplaunch-" + run_id + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      posix::throw_errno("mkdtemp " + tmpl);
    }
    log_dir = tmpl;
    log::info("--redirects/--tee without --log-dir: writing worker logs under {}", log_dir);
  }
}

void Agent::Impl::start_workers() {
  workers.reserve(plan.workers.size());
  for (const auto& spec : plan.workers) {
    LinePrefix::Fields f{spec.rank, spec.local_rank, plan.layout.node_rank, plan.layout.hostname};
    workers.emplace_back(&spec, LinePrefix(config.prefix, f));
  }
  // Open log files before spawning, so a bad --log-dir stops nothing.
  std::vector<std::pair<posix::Fd, posix::Fd>> files(workers.size());
  if (!log_dir.empty()) {
    for (size_t i = 0; i < workers.size(); ++i) {
      auto dir = std::filesystem::path(log_dir) / std::to_string(workers[i].spec->rank);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      auto open_log = [&](const char* name) {
        auto path = (dir / name).string();
        posix::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd) {
          throw LaunchError(k_exit_usage, "--log-dir: cannot write " + path + ": " +
                                              std::strerror(errno) +
                                              "; choose a writable directory");
        }
        return fd;
      };
      files[i] = {open_log("stdout.log"), open_log("stderr.log")};
    }
  }
  start_time = wall_now();
  auto spawned = spawn_workers(plan.workers);
  for (size_t i = 0; i < spawned.size(); ++i) {
    auto& w = workers[i];
    w.pid = spawned[i].pid;
    w.start_time = start_time;
    worker_by_pid[w.pid] = static_cast<int>(i);
    const int lr = w.spec->local_rank;
    const bool console = config.console_allows(w.spec->rank, lr);
    for (int is_err = 0; is_err < 2; ++is_err) {
      Stream s;
      s.fd = posix::Fd(is_err ? spawned[i].err_fd : spawned[i].out_fd);
      s.worker = static_cast<int>(i);
      s.is_err = is_err != 0;
      const bool redirected =
          is_err ? config.redirects.selects_stderr(lr) : config.redirects.selects_stdout(lr);
      s.to_console = console && !redirected;
      s.file = is_err ? std::move(files[i].second) : std::move(files[i].first);
      streams.push_back(std::move(s));
    }
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    watch(streams[i].fd.get(), i);
  }
}

void Agent::Impl::flush_console(int fd) {
  if (!batch.empty() && console_ok[fd] &&
      !posix::write_all(fd, batch.data())) {
    console_ok[fd] = false;  // e.g. `ddplaunch ... | head`: keep running, stop printing
  }
  batch.clear();
}

void Agent::Impl::start_lines(const Stream& s) {
  prefix_text.clear();
  workers[static_cast<size_t>(s.worker)].prefix.append_to(prefix_text, std::time(nullptr));
}

void Agent::Impl::take_line(const Stream& s, std::string_view line) {
  if (s.is_err) {
    workers[static_cast<size_t>(s.worker)].stderr_tail.push(line);
  }
  if (s.to_console) {
    batch.add(prefix_text, line);
    if (batch.must_flush()) {
      flush_console(s.is_err ? 2 : 1);
    }
  }
}

// Reads one chunk: k_data, k_empty (nothing to read now) or k_eof.
Agent::Impl::ReadResult Agent::Impl::read_stream(size_t index) {
  Stream& s = streams[index];
  if (!s.fd) {
    return ReadResult::k_eof;
  }
  ssize_t n = ::read(s.fd.get(), buffer.data(), buffer.size());
  if (n < 0) {
    return (errno == EAGAIN || errno == EINTR) ? ReadResult::k_empty : ReadResult::k_eof;
  }
  if (n == 0) {
    close_stream(index);
    return ReadResult::k_eof;
  }
  std::string_view data(buffer.data(), static_cast<size_t>(n));
  if (s.file) {
    posix::write_all(s.file.get(), data);
  }
  if (s.to_console || s.is_err) {
    start_lines(s);
    s.splitter.feed(data, [&](std::string_view line) { take_line(s, line); });
    flush_console(s.is_err ? 2 : 1);
  }
  return ReadResult::k_data;
}

void Agent::Impl::close_stream(size_t index) {
  Stream& s = streams[index];
  if (!s.fd) {
    return;
  }
  start_lines(s);
  s.splitter.finish([&](std::string_view line) { take_line(s, line); });
  flush_console(s.is_err ? 2 : 1);
  epoll_ctl(epoll.get(), EPOLL_CTL_DEL, s.fd.get(), nullptr);
  s.fd.close();
  s.file.close();
}

// The worker has ended: take what is already in its pipes, so its last
// stderr lines are known before the failure is reported.
void Agent::Impl::drain_worker(int worker) {
  for (size_t i = 0; i < streams.size(); ++i) {
    if (streams[i].worker == worker) {
      // Bounded: a grandchild may still be writing to the pipe.
      for (int rounds = 0; rounds < 64 && read_stream(i) == ReadResult::k_data; ++rounds) {
      }
    }
  }
}

void Agent::Impl::apply(const Supervisor::Actions& actions) {
  for (const auto& a : actions.signals) {
    signal_group(workers[static_cast<size_t>(a.local_rank)].pid, a.sig);
  }
}

RankOutcome Agent::Impl::outcome(int index) const {
  const Worker& w = workers[static_cast<size_t>(index)];
  RankOutcome o;
  o.rank = w.spec->rank;
  o.local_rank = w.spec->local_rank;
  o.node_rank = plan.layout.node_rank;
  o.host = plan.layout.hostname;
  o.pid = w.pid;
  o.exit = supervisor->exit_of(index);
  o.stopped_by_launcher = supervisor->stopped_by_launcher(index);
  o.start_time = w.start_time;
  o.end_time = w.end_time;
  return o;
}

void Agent::Impl::handle_exit(pid_t pid, const ExitInfo& info) {
  auto it = worker_by_pid.find(pid);
  if (it == worker_by_pid.end()) {
    return;  // a reparented orphan (we are a subreaper)
  }
  const int index = it->second;
  workers[static_cast<size_t>(index)].end_time = wall_now();
  drain_worker(index);
  auto actions = supervisor->on_worker_exit(index, info, SteadyClock::now());
  apply(actions);
  if (actions.local_failure) {
    RankOutcome root = outcome(index);
    const auto& tail = workers[static_cast<size_t>(index)].stderr_tail.lines();
    root.last_stderr.assign(tail.begin(), tail.end());
    log::debug("rank {} failed first: {}", root.rank, info.describe());
    if (link != nullptr && !verdict) {
      verdict = link->publish_stop(JobVerdict{info.shell_code(), "", root});
    }
  }
}

JobSummary Agent::Impl::run() {
  // Signals first: from here on they arrive through the signalfd.
  posix::SignalFd signals({SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  ::signal(SIGPIPE, SIG_IGN);
  become_subreaper();
  epoll = posix::Fd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) {
    posix::throw_errno("epoll_create1");
  }
  watch(signals.fd(), k_tag_signals);
  if (link != nullptr) {
    for (int fd : link->fds()) {
      watch(fd, k_tag_link | static_cast<uint64_t>(fd));
    }
  }
  setup_log_dir();
  supervisor.emplace(static_cast<int>(plan.workers.size()),
                     std::chrono::milliseconds(
                         static_cast<long long>(config.term_timeout_s * 1000.0)));
  try {
    start_workers();
  } catch (const SpawnError& e) {
    if (link != nullptr && !verdict) {
      link->publish_stop(JobVerdict{k_exit_cannot_execute,
                                    "node " + std::to_string(plan.layout.node_rank) + ": " +
                                        e.what(),
                                    std::nullopt});
    }
    throw;
  }

  bool reported_success = false;
  std::optional<SteadyClock::time_point> drain_deadline;
  std::array<epoll_event, 64> events;
  while (true) {
    const bool workers_done = supervisor->finished();
    if (workers_done && link != nullptr && !supervisor->stopping() && !verdict &&
        !reported_success) {
      link->publish_local_success();
      reported_success = true;
    }
    const bool verdict_known = link == nullptr || supervisor->stopping() || verdict.has_value();
    if (workers_done && verdict_known) {
      if (!drain_deadline) {
        // Grandchildren left in a worker's group, or escaped from it, go now.
        for (const auto& w : workers) {
          signal_group(w.pid, SIGKILL);
        }
        for (int round = 0; round < 8 && kill_stray_children() > 0; ++round) {
          while (reap_any()) {
          }
        }
        drain_deadline = SteadyClock::now() + k_drain_timeout;
      }
      bool open = false;
      for (const auto& s : streams) {
        open = open || s.fd.valid();
      }
      if (!open || SteadyClock::now() >= *drain_deadline) {
        break;
      }
    }

    auto now = SteadyClock::now();
    std::optional<SteadyClock::time_point> wake = supervisor->deadline();
    if (link != nullptr) {
      auto t = link->next_tick();
      wake = wake ? std::min(*wake, t) : t;
    }
    if (drain_deadline) {
      wake = wake ? std::min(*wake, *drain_deadline) : *drain_deadline;
    }
    int timeout_ms = -1;
    if (wake) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
    }
    int n = epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      posix::throw_errno("epoll_wait");
    }
    now = SteadyClock::now();
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[static_cast<size_t>(i)].data.u64;
      if (tag == k_tag_signals) {
        while (auto sig = signals.read_one()) {
          if (*sig == SIGCHLD) {
            while (auto reaped = reap_any()) {
              handle_exit(reaped->first, reaped->second);
            }
            continue;
          }
          const bool was_stopping = supervisor->stopping();
          log::info("received {}: {}", signal_name(*sig),
                    (*sig == SIGUSR1 || *sig == SIGUSR2) ? "forwarding it to the workers"
                    : was_stopping ? "killing the workers now"
                                   : "stopping the workers");
          apply(supervisor->on_launcher_signal(*sig, now));
          if (!was_stopping && supervisor->stopping() && link != nullptr && !verdict) {
            verdict = link->publish_stop(JobVerdict{128 + *sig,
                                          "node " + std::to_string(plan.layout.node_rank) +
                                              " (" + plan.layout.hostname + ") received " +
                                              signal_name(*sig),
                                          std::nullopt});
          }
        }
      } else if ((tag & k_tag_link) != 0) {
        auto v = link->on_readable(static_cast<int>(tag & ~k_tag_link));
        if (v && !verdict) {
          verdict = v;
          if (!v->success()) {
            apply(supervisor->on_remote_stop(v->exit_code, now));
          }
        }
      } else {
        read_stream(static_cast<size_t>(tag));
      }
    }
    if (link != nullptr && now >= link->next_tick()) {
      auto v = link->on_tick(now);
      if (v && !verdict) {
        verdict = v;
        if (!v->success()) {
          apply(supervisor->on_remote_stop(v->exit_code, now));
        }
      }
    }
    if (auto d = supervisor->deadline(); d && now >= *d) {
      log::warn("workers still running {} s after SIGTERM: sending SIGKILL",
                config.term_timeout_s);
      apply(supervisor->on_deadline(now));
    }
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    close_stream(i);
  }

  JobSummary summary;
  summary.run_id = plan.layout.run_id;
  summary.start_time = start_time;
  summary.end_time = wall_now();
  summary.reason = supervisor->reason();
  summary.exit_code = supervisor->exit_code();
  summary.stop_signal = supervisor->stop_signal();
  std::vector<RankOutcome> local;
  for (size_t i = 0; i < workers.size(); ++i) {
    local.push_back(outcome(static_cast<int>(i)));
  }
  if (link != nullptr && verdict && !verdict->success()) {
    // Multi-node: the job's verdict (the first stop published) decides, on every node.
    summary.exit_code = verdict->exit_code;
    summary.root_cause = verdict->root_cause;
    summary.remote_message = verdict->root_cause ? "" : verdict->message;
    summary.reason = supervisor->root_cause() && verdict->root_cause &&
                             verdict->root_cause->node_rank == plan.layout.node_rank
                         ? StopReason::k_worker_failed
                         : StopReason::k_remote;
  } else if (auto root = supervisor->root_cause()) {
    summary.root_cause = outcome(*root);
    const auto& tail = workers[static_cast<size_t>(*root)].stderr_tail.lines();
    summary.root_cause->last_stderr.assign(tail.begin(), tail.end());
  } else if (verdict && !verdict->success()) {
    summary.exit_code = verdict->exit_code;
    summary.root_cause = verdict->root_cause;
    summary.remote_message = verdict->message;
    summary.reason = StopReason::k_remote;
  }
  summary.ranks = link != nullptr ? link->finish(local) : local;
  summary.launcher_max_rss_kib = peak_rss_kib();
  return summary;
}

Agent::Agent(const Config& config, Plan plan, JobLink* link)
    : m_impl(std::make_unique<Impl>(config, std::move(plan), link)) {}

Agent::~Agent() = default;

JobSummary Agent::run() { return m_impl->run(); }

}  // namespace ddplaunch
