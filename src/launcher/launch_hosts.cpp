#include "launcher/launch_hosts.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <system_error>

#include "config/integer.hpp"
#include "ddplaunch/error.hpp"
#include "launcher/forward.hpp"
#include "launcher/plan.hpp"
#include "log.hpp"
#include "output/console.hpp"
#include "output/lines.hpp"
#include "posix/event_loop.hpp"
#include "posix/fd.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"
#include "posix/signals.hpp"
#include "rendezvous/store_host.hpp"
#include "supervise/exit_info.hpp"
#include "supervise/signal_policy.hpp"

extern char** environ;

namespace ddplaunch {

namespace {

using Steady = std::chrono::steady_clock;

constexpr uint64_t k_tag_signals = 1ULL << 62;
constexpr uint64_t k_tag_console = 1ULL << 61;
constexpr uint64_t k_tag_upstream = 1ULL << 60;
// A started process's fds: 4 * index + 0 stdout, 1 stderr, 2 stdin.
constexpr uint64_t k_tag_in = 2;
// The first progress line after this long, then one every k_progress_every.
constexpr auto k_progress_after = std::chrono::seconds(2);
constexpr auto k_progress_every = std::chrono::seconds(5);
constexpr int k_ssh_unreachable = 255;
// How long agents may run on after one failed before this command stops them.
constexpr auto k_stop_grace = std::chrono::seconds(2);  // ssh's own exit code for its failures

// One process this command started: an agent (here, or over ssh) or a
// subtree's root.
struct Started {
  AgentStart start;
  pid_t pid = -1;
  posix::Fd in, out, err;
  std::string to_write;  // channel bytes not yet taken by its stdin
  bool held = false;     // its header waits for node 0's store port
  LineSplitter out_lines, err_lines;
  int ready = 0;  // nodes of it that said they started
  std::optional<ExitInfo> exit;
  std::string last_error;  // its last stderr line
  std::string ssh_said;    // the last line ssh itself wrote (ssh_line())
};

std::vector<HostSlots> hosts_of(const Config& config) {
  if (config.hostfile.empty()) {
    return config.hosts;
  }
  if (!config.hosts.empty()) {
    throw UsageError("--hosts and --hostfile both name the hosts; give one of them");
  }
  const auto text = posix::read_small_file(config.hostfile, 16 << 20);
  if (!text) {
    throw UsageError("--hostfile " + config.hostfile + ": cannot read it: " + std::strerror(errno));
  }
  return parse_hostfile(*text, config.hostfile);
}

std::string self_path() {
  auto path = posix::self_exe();
  if (!path) {
    throw std::system_error(errno, std::generic_category(), "readlink /proc/self/exe");
  }
  return *path;
}

std::string current_dir() {
  std::string dir(4096, '\0');
  if (::getcwd(dir.data(), dir.size()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "getcwd");
  }
  dir.resize(std::strlen(dir.c_str()));
  return dir;
}

// Whether `host` is this machine: its agent then runs here, without ssh.
bool is_this_host(const std::string& host) {
  if (host == "localhost" || posix::is_loopback(posix::resolve_numeric(host))) {
    return true;
  }
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  const std::string self = name;
  if (host == self || host == self.substr(0, self.find('.'))) {
    return true;
  }
  return posix::is_local_address(host);
}

// Starts `argv` in a process group of its own, with the given fds as its
// stdin, stdout and stderr, and the signals back to their defaults.
pid_t spawn(const std::vector<std::string>& argv, int in, int out, int err) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, in, 0);
  posix_spawn_file_actions_adddup2(&actions, out, 1);
  posix_spawn_file_actions_adddup2(&actions, err, 2);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (const int sig : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD, SIGHUP}) {
    if (sig != SIGHUP || !posix::inherited_ignore(SIGHUP)) {
      sigaddset(&defaults, sig);
    }
  }
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = argv.front().find('/') == std::string::npos
                     ? posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ)
                     : posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw LaunchError(k_exit_cannot_execute,
                      "cannot execute '" + argv.front() + "': " + std::strerror(rc) +
                          (argv.front() == "ssh" ? " (install openssh-client)" : ""));
  }
  return pid;
}

std::string describe_start(const AgentStart& s) {
  std::string where = s.local ? "here" : "over ssh";
  if (s.hosts > 1) {
    return "nodes " + std::to_string(s.node_rank) + "-" +
           std::to_string(s.node_rank + s.hosts - 1) + " (through " + s.host + ")";
  }
  return "node " + std::to_string(s.node_rank) + " (" + s.host + ", " + where + ")";
}

void print_plan(const HostsPlan& plan, ConsoleWriter& console) {
  std::string text =
      "ddplaunch: " + std::to_string(plan.nnodes) + " nodes; node 0 is " + plan.master_addr + "\n";
  for (const auto& s : plan.starts) {
    text += describe_start(s) + ":";
    for (const auto& a : s.argv) {
      text += " " + shell_quote(a);
    }
    text += "\n";
  }
  console.write_own(1, text);
}

class HostsLauncher {
 public:
  HostsLauncher(posix::SignalFd& signals, ConsoleWriter& console, AgentChannel* upstream,
                bool elastic, int max_nodes, const char* via)
      : m_signals(signals),
        m_console(console),
        m_upstream(upstream),
        m_elastic(elastic),
        m_max_nodes(max_nodes),
        m_via(via) {
    m_loop.set(signals.fd(), EPOLLIN, k_tag_signals);
    m_loop.set(console.wake_fd(), EPOLLIN, k_tag_console);
    if (m_upstream != nullptr) {
      posix::set_nonblocking(m_upstream->fd.get());
      m_loop.set(m_upstream->fd.get(), EPOLLIN, k_tag_upstream);
    }
  }

  // Starts `plan`'s processes, each given `header` on its channel. Direct
  // starts begin at once; with a `connect_cost` (a simulation's), the
  // connections begin one per `connect_cost`, as the CPU cost of an ssh
  // handshake serialises them on the host that opens them.
  void start_all(const HostsPlan& plan, std::string header,
                 std::chrono::milliseconds connect_cost) {
    m_plan = plan.starts;
    m_header = std::move(header);
    m_connect_cost = connect_cost;
    m_started.reserve(m_plan.size());
    m_total_nodes = 0;
    for (const auto& s : m_plan) {
      m_total_nodes += s.hosts;
    }
    m_started_at = Steady::now();
    m_next_progress = m_started_at + k_progress_after;
    m_next_start = m_started_at + connect_cost;
    if (m_upstream != nullptr) {
      m_sent += m_upstream->pending;  // signals that came with the header
      m_upstream->pending.clear();
    }
    start_due(m_started_at);
  }

  // Node 0's agent picks its store's port (--pick-store-port): every other
  // agent's header, `header` with that port, waits until node 0 says it.
  void hold_headers_for_store_port(ChannelHeader header) { m_held_header = std::move(header); }

  // Relays until every started process has ended and its pipes are empty.
  void run() {
    while (!done()) {
      // A subtree's progress is its root's to tell.
      const bool telling = m_ready_nodes < m_total_nodes && !m_failed && m_upstream == nullptr;
      std::optional<Steady::time_point> deadline;
      if (telling) {
        deadline = m_next_progress;
      }
      if (starting()) {
        deadline = std::min(deadline.value_or(m_next_start), m_next_start);
      }
      if (m_stop_at && *m_stop_at != Steady::time_point::max()) {
        deadline = std::min(deadline.value_or(*m_stop_at), *m_stop_at);
      }
      for (const auto& ready : m_loop.wait(deadline)) {
        dispatch(ready);
      }
      const auto now = Steady::now();
      if (m_stop_at && now >= *m_stop_at && !done()) {
        log::warn("{} and the other nodes still run: stopping them", m_stop_reason);
        send_to_all(std::string(1, k_channel_stop));
        m_stop_at = Steady::time_point::max();
      }
      start_due(now);
      if (telling && m_ready_nodes < m_total_nodes && !m_failed && now >= m_next_progress) {
        say_progress();
      }
    }
  }

  // The job's exit code: the first agent to end with a failure says it
  // (they agree on the job's verdict, and one that failed alone ended
  // first), but a node that failed its health check makes it 5, however
  // soon the others ended with 3 for it; this command's own 3 when a node
  // could not be started; 4 when only ssh connections failed (each agent
  // ended by its dropped channel).
  int exit_code() const {
    if (m_failed_start) {
      return k_exit_rendezvous;
    }
    const bool unhealthy = std::any_of(m_started.begin(), m_started.end(), [](const Started& s) {
      return s.exit && !s.exit->by_signal() && s.exit->code() == k_exit_unhealthy;
    });
    if (m_first_failure && *m_first_failure == k_exit_rendezvous && unhealthy) {
      return k_exit_unhealthy;
    }
    if (m_first_failure) {
      return *m_first_failure;
    }
    const bool lost = std::any_of(m_started.begin(), m_started.end(), [this](const Started& s) {
      return s.exit && !s.exit->success() && !spare(s);
    });
    if (m_stop_signal) {
      return 128 + *m_stop_signal;
    }
    return lost ? k_exit_node_lost : k_exit_ok;
  }

 private:
  // Once every member of the job (every host up to MAX) has ended, the
  // spares still waiting for a place are stopped (quietly: the job said
  // how it ended), and those not started yet never start.
  void stop_idle_spares() {
    if (m_job_over || m_max_nodes >= static_cast<int>(m_plan.size())) {
      return;
    }
    for (size_t i = 0; i < m_plan.size(); ++i) {
      const bool member = m_plan[i].hosts > 1 || m_plan[i].node_rank < m_max_nodes;
      if (member && (i >= m_started.size() || !m_started[i].exit)) {
        return;
      }
    }
    m_job_over = true;
    log::debug("every member of the job has ended: stopping the spares");
    send_to_all(std::string(1, k_channel_stop));
  }

  // A host after --nnodes MAX: it starts as a hot spare (no node rank).
  bool spare(const Started& s) const {
    return s.start.hosts == 1 && s.start.node_rank >= m_max_nodes;
  }

  bool starting() const {
    return m_started.size() < m_plan.size() && !m_failed && !m_stop_signal && !m_stopping;
  }

  bool done() const {
    return !starting() && std::all_of(m_started.begin(), m_started.end(), [](const Started& s) {
      return s.exit && !s.out.valid() && !s.err.valid();
    });
  }

  // Starts what is due by `now`: each connection of a simulation one
  // connect_cost after the one before.
  void start_due(Steady::time_point now) {
    while (starting()) {
      const AgentStart& s = m_plan[m_started.size()];
      if (s.connection && m_connect_cost.count() > 0) {
        if (now < m_next_start) {
          return;
        }
        m_next_start += m_connect_cost;
      }
      start_one(s);
    }
  }

  void start_one(const AgentStart& s) {
    auto in = posix::make_pipe();
    auto out = posix::make_pipe();
    auto err = posix::make_pipe();
    const pid_t pid = spawn(s.argv, in.read.get(), out.write.get(), err.write.get());
    Started& started = m_started.emplace_back();
    started.start = s;
    started.pid = pid;
    started.in = std::move(in.write);
    started.out = std::move(out.read);
    started.err = std::move(err.read);
    started.held = m_held_header && s.node_rank != 0;
    started.to_write = started.held ? std::string() : m_header + m_sent;
    for (const int fd : {started.in.get(), started.out.get(), started.err.get()}) {
      posix::set_nonblocking(fd);
    }
    const uint64_t base = 4 * (m_started.size() - 1);
    m_loop.set(started.out.get(), EPOLLIN, base);
    m_loop.set(started.err.get(), EPOLLIN, base + 1);
    flush_in(started, base);
  }

  void dispatch(const posix::EventLoop::Ready& ready) {
    if (ready.tag == k_tag_signals) {
      while (auto sig = m_signals.read_one()) {
        on_signal(*sig);
      }
      return;
    }
    if (ready.tag == k_tag_console) {
      m_console.read_wake();
      resume_streams();
      return;
    }
    if (ready.tag == k_tag_upstream) {
      read_upstream();
      return;
    }
    const size_t index = ready.tag / 4;
    const uint64_t kind = ready.tag % 4;
    if (index >= m_started.size()) {
      return;
    }
    Started& s = m_started[index];
    if (kind == k_tag_in) {
      flush_in(s, 4 * index);
    } else {
      read_stream(s, kind == 0);
    }
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) {
      reap();
      return;
    }
    // Every agent acts on it as if it had received it: a stop signal ends
    // the job on every node, SIGUSR1/2 reach every worker.
    send_to_all(std::string(1, static_cast<char>(sig)));
  }

  void send_to_all(const std::string& bytes) {
    m_sent += bytes;  // and to what starts later
    for (const char b : bytes) {
      if (is_stop_signal(static_cast<unsigned char>(b)) && !m_stop_signal) {
        m_stop_signal = static_cast<unsigned char>(b);
      }
      m_stopping = m_stopping || b == k_channel_stop;  // no more agents start
    }
    if ((m_stop_signal || m_stopping) && m_held_header) {
      release_headers(0);  // they stop before they start: the port no longer matters
    }
    for (size_t i = 0; i < m_started.size(); ++i) {
      Started& s = m_started[i];
      if (s.in.valid() && !s.exit && !s.held) {
        s.to_write += bytes;
        flush_in(s, 4 * i);
      }
    }
  }

  // The held headers go out, with node 0's store port (0: the command
  // line's), followed by the channel bytes sent so far.
  void release_headers(int store_port) {
    ChannelHeader header = std::move(*m_held_header);
    m_held_header.reset();
    header.store_port = store_port;
    m_header = encode_channel_header(header);
    for (size_t i = 0; i < m_started.size(); ++i) {
      Started& s = m_started[i];
      if (s.held) {
        s.held = false;
        s.to_write = m_header + m_sent;
        flush_in(s, 4 * i);
      }
    }
  }

  void read_upstream() {
    char buf[256];
    while (true) {
      const ssize_t n = ::read(m_upstream->fd.get(), buf, sizeof(buf));
      if (n > 0) {
        send_to_all(std::string(buf, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && errno == EAGAIN) {
        return;
      }
      // The launching command above is gone: so is every channel below.
      m_loop.remove(m_upstream->fd.get());
      m_upstream->fd.close();
      for (auto& s : m_started) {
        m_loop.remove(s.in.get());
        s.in.close();
      }
      return;
    }
  }

  void flush_in(Started& s, uint64_t base) {
    while (!s.to_write.empty() && s.in.valid()) {
      const ssize_t n = ::write(s.in.get(), s.to_write.data(), s.to_write.size());
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && errno == EAGAIN) {
        m_loop.set(s.in.get(), EPOLLOUT, base + k_tag_in);
        return;
      }
      if (n < 0) {
        // It ended (EPIPE): nothing more reaches it.
        m_loop.remove(s.in.get());
        s.in.close();
        s.to_write.clear();
        return;
      }
      s.to_write.erase(0, static_cast<size_t>(n));
    }
    if (s.in.valid() && m_loop.contains(s.in.get())) {
      m_loop.remove(s.in.get());
    }
  }

  void read_stream(Started& s, bool is_out) {
    posix::Fd& fd = is_out ? s.out : s.err;
    while (fd.valid()) {
      const ssize_t n = ::read(fd.get(), m_buffer, sizeof(m_buffer));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && errno == EAGAIN) {
        return;
      }
      if (n <= 0) {
        auto& lines = is_out ? s.out_lines : s.err_lines;
        lines.finish([&](std::string_view text, LineEnd end) { on_line(s, is_out, text, end); });
        m_loop.remove(fd.get());
        fd.close();
        return;
      }
      auto& lines = is_out ? s.out_lines : s.err_lines;
      std::string_view chunk(m_buffer, static_cast<size_t>(n));
      const size_t last = chunk.rfind('\n');
      if (lines.at_line_start() && last != std::string_view::npos &&
          chunk.find(k_agent_ready) == std::string_view::npos &&
          chunk.find(k_agent_store_port) == std::string_view::npos) {
        // Whole lines with nothing to count: one write for all of them.
        const std::string_view whole = chunk.substr(0, last + 1);
        if (!is_out && last > 0) {
          const size_t before = whole.rfind('\n', last - 1);
          const size_t begin = before == std::string_view::npos ? 0 : before + 1;
          s.last_error = trimmed(whole.substr(begin, std::min<size_t>(last - begin, 400)));
        }
        if (!is_out && !s.start.local) {
          for (size_t at = 0; at < whole.size();) {
            const size_t nl = whole.find('\n', at);
            note_ssh_line(s, whole.substr(at, nl - at));
            at = nl + 1;
          }
        }
        m_console.write(is_out ? 1 : 2, whole);
        chunk.remove_prefix(last + 1);
      }
      lines.feed(chunk, [&](std::string_view text, LineEnd end) { on_line(s, is_out, text, end); });
      if (m_console.backlogged(is_out ? 1 : 2)) {
        // The console is behind: this pipe waits (and, through it, ssh, the
        // agent and its workers) until the console has room; no line is dropped.
        m_loop.remove(fd.get());
        m_paused.push_back(fd.get());
        return;
      }
    }
  }

  void resume_streams() {
    for (size_t i = 0; i < m_started.size(); ++i) {
      for (const bool is_out : {true, false}) {
        const int fd = is_out ? m_started[i].out.get() : m_started[i].err.get();
        if (fd >= 0 && std::find(m_paused.begin(), m_paused.end(), fd) != m_paused.end() &&
            !m_console.backlogged(is_out ? 1 : 2)) {
          m_loop.set(fd, EPOLLIN, 4 * i + (is_out ? 0 : 1));
          m_paused.erase(std::find(m_paused.begin(), m_paused.end(), fd));
        }
      }
    }
  }

  void on_line(Started& s, bool is_out, std::string_view text, LineEnd end) {
    if (is_out && end == LineEnd::k_newline && text.starts_with(k_agent_store_port) &&
        s.start.node_rank == 0 && m_held_header) {
      const auto port = parse_integer_in(text.substr(k_agent_store_port.size()), 1, 65535);
      log::debug("node 0's store listens on port {}", port.value_or(0));
      release_headers(port ? static_cast<int>(*port) : 0);
      return;
    }
    if (is_out && end == LineEnd::k_newline && text.starts_with(k_agent_ready)) {
      ++s.ready;
      ++m_ready_nodes;
      if (m_upstream != nullptr) {
        m_console.write(1, std::string(text) + "\n");  // the launching command above counts it
      }
      if (m_ready_nodes == m_total_nodes && m_upstream == nullptr) {
        const auto took = Steady::now() - m_started_at;
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
        if (took >= k_progress_after) {
          log::info("all {} nodes started, after {} ms", m_total_nodes, ms);
        } else {
          log::debug("all {} nodes started, after {} ms", m_total_nodes, ms);
        }
      }
      return;
    }
    if (!is_out && !text.empty()) {
      s.last_error = trimmed(text.substr(0, 400));
      if (!s.start.local) {
        note_ssh_line(s, text);
      }
    }
    std::string line(text);
    switch (end) {
      case LineEnd::k_newline:
      case LineEnd::k_bare_newline:
        line += '\n';
        break;
      case LineEnd::k_return:
        line += '\r';
        break;
      case LineEnd::k_piece:
        break;
    }
    m_console.write(is_out ? 1 : 2, line);
  }

  // What ssh itself says when a connection fails or drops (its lines share
  // the agent's stderr with the agent's and the workers' own).
  // A line without the '\r' ssh ends its own with ("\r\n").
  static std::string trimmed(std::string_view line) {
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) {
      line.remove_suffix(1);
    }
    return std::string(line);
  }

  static void note_ssh_line(Started& s, std::string_view line) {
    line = std::string_view(line).substr(0, line.find_last_not_of("\r\n") + 1);
    static constexpr std::string_view k_ssh_starts[] = {"ssh: ",
                                                        "client_loop: ",
                                                        "Connection to ",
                                                        "Connection closed by ",
                                                        "Timeout, server ",
                                                        "packet_write_wait: ",
                                                        "Read from remote host ",
                                                        "kex_exchange_identification: ",
                                                        "Bad owner or permissions"};
    for (const auto start : k_ssh_starts) {
      if (line.starts_with(start)) {
        s.ssh_said = trimmed(line.substr(0, 400));
        return;
      }
    }
  }

  void reap() {
    while (true) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) {
        return;
      }
      for (auto& s : m_started) {
        if (s.pid == pid) {
          s.exit = ExitInfo::from_wait_status(status);
          m_loop.remove(s.in.get());
          s.in.close();
          if (s.start.node_rank == 0 && m_held_header) {
            release_headers(0);  // it never said its port: the others are stopped below
          }
          if (s.ready < s.start.hosts) {
            on_start_failed(s);
          } else if (!s.start.local && !s.exit->by_signal() &&
                     s.exit->code() == k_ssh_unreachable) {
            log::warn("the ssh connection to {} dropped{}: the agents there stop their workers",
                      describe_start(s.start), s.ssh_said.empty() ? "" : " (" + s.ssh_said + ")");
          } else if (!s.exit->success()) {
            on_agent_failed(s);
          }
        }
      }
      stop_idle_spares();
    }
  }

  // `s` ended before every node it starts said so: it could not be started
  // (ssh could not connect, ddplaunch is missing there, ...). A fixed-size
  // job cannot run without it: every other node is stopped.
  void on_start_failed(const Started& s) {
    if (m_job_over && spare(s)) {
      return;  // stopped: the job ended before it had a place
    }
    std::string why;
    if (!s.start.local && !s.exit->by_signal() && s.exit->code() == k_ssh_unreachable) {
      why = "ssh could not reach " + s.start.host;
    } else if (!s.start.local && !s.exit->by_signal() && s.exit->code() == 127) {
      why = "ddplaunch is not found on " + s.start.host + " (give --remote-ddplaunch PATH)";
    } else {
      why = "it ended with " + s.exit->describe() + " before it started";
    }
    if (!s.last_error.empty()) {
      why += ": " + s.last_error;
    }
    if (m_elastic) {
      log::warn("{} could not be started: {}; the job goes on without it", describe_start(s.start),
                why);
      return;
    }
    log::error("{} could not be started: {}; stopping the job on every node",
               describe_start(s.start), why);
    if (!m_failed) {
      m_failed = true;
      m_failed_start = true;
      send_to_all(std::string(1, k_channel_stop));
    }
  }

  // An agent ended with a failure. The job's verdict reaches every node
  // through the store within milliseconds; an agent that failed before it
  // joined (a rendezvous error) leaves no verdict, so the others are stopped
  // if still running after k_stop_grace.
  void on_agent_failed(const Started& s) {
    if (spare(s)) {
      // A spare says nothing of the job: one that was never needed (or came
      // after the job ended) ends as it may; one that took a lost node's
      // place fails with the job, whose members say the code.
      log::debug("{} ended with {}", describe_start(s.start), s.exit->describe());
      return;
    }
    if (!m_first_failure) {
      m_first_failure = s.exit->shell_code();
    }
    if (!m_elastic && !m_stop_at) {
      m_stop_at = Steady::now() + k_stop_grace;
      m_stop_reason = describe_start(s.start) + " ended with " + s.exit->describe();
    }
  }

  void say_progress() {
    std::string waiting;
    int shown = 0;
    int more = 0;
    for (size_t i = 0; i < m_plan.size(); ++i) {
      const bool waited =
          i >= m_started.size() || (m_started[i].ready < m_plan[i].hosts && !m_started[i].exit);
      if (!waited) {
        continue;
      }
      if (shown < 3) {
        waiting += (waiting.empty() ? "" : ", ") + m_plan[i].host;
        ++shown;
      } else {
        ++more;
      }
    }
    if (more > 0) {
      waiting += " and " + std::to_string(more) + " more";
    }
    log::info("{}: {}/{} connected, waiting for {}", m_via, m_ready_nodes, m_total_nodes, waiting);
    m_next_progress = Steady::now() + k_progress_every;
  }

  posix::SignalFd& m_signals;
  ConsoleWriter& m_console;
  AgentChannel* m_upstream;
  bool m_elastic;
  int m_max_nodes;          // --nnodes MAX: the hosts after it start as spares
  bool m_job_over = false;  // every member ended: the spares are not needed
  bool m_stopping = false;  // k_channel_stop sent (or relayed from above)
  const char* m_via;        // "ssh" or "local", for the progress lines
  posix::EventLoop m_loop;
  std::vector<AgentStart> m_plan;
  std::string m_header;
  std::optional<ChannelHeader> m_held_header;  // hold_headers_for_store_port()'s, until released
  std::string m_sent;  // the signal bytes sent so far, for what starts later
  std::chrono::milliseconds m_connect_cost{0};
  Steady::time_point m_next_start;  // when the next simulated connection may begin
  std::vector<Started> m_started;   // m_plan's first ones, in order
  std::vector<int> m_paused;        // stdout/stderr pipes not read while the console is behind
  int m_total_nodes = 0;
  int m_ready_nodes = 0;
  bool m_failed = false;
  bool m_failed_start = false;
  std::optional<int> m_stop_signal;
  std::optional<int> m_first_failure;           // the first agent's failing exit code
  std::optional<Steady::time_point> m_stop_at;  // when to stop agents a failure left running
  std::string m_stop_reason;
  Steady::time_point m_started_at;
  Steady::time_point m_next_progress;
  char m_buffer[65536];
};

}  // namespace

int run_hosts_launch(const Config& config, const CommandLine& command_line, const EnvMap& env,
                     AgentChannel* upstream) {
  posix::SignalFd signals(handled_signals(posix::inherited_ignore(SIGHUP)));
  ::signal(SIGPIPE, SIG_IGN);

  PlanContext context;
  // Node 0's store port, when this command picked it for a node 0 here:
  // held until the job ends, so that no other launcher on this host picks it
  // while node 0's agent starts (its store binds beside the holder).
  posix::Fd store_port;
  context.self_path = self_path();
  context.cwd = current_dir();
  const bool subtree = config.subtree >= 0;
  if (subtree) {
    if (upstream == nullptr) {
      throw UsageError("--subtree is for the ddplaunch a launching command starts");
    }
    context.hosts = config.hosts;
    context.first_node_rank = config.subtree;
    context.nnodes = config.nnodes;
    context.master_addr = config.master_addr;
    context.master_port = config.master_port;
    context.is_local.assign(context.hosts.size(), false);
    context.is_local.front() = true;
  } else {
    context.hosts = order_hosts(config, hosts_of(config));
    const bool local = config.launcher == Launcher::k_local;
    for (const auto& h : context.hosts) {
      context.is_local.push_back(local ? context.is_local.empty() : is_this_host(h.host));
    }
    if (config.source_of("master_addr") == "flag") {
      context.master_addr = config.master_addr;
    } else if (local) {
      context.master_addr = "127.0.0.1";
    }
    if (config.source_of("master_port") == "flag") {
      context.master_port = config.master_port;
    } else {
      // Node 0 here: a port free now, and held; elsewhere, its agent picks
      // one free there and says it, and the other agents are told (so that
      // two jobs on the same hosts never share one).
      context.master_port = config.master_port;
      if (context.is_local.front()) {
        posix::HeldPort held = posix::hold_free_port();
        context.master_port = held.port;
        store_port = std::move(held.holder);
      } else if (config.source_of("master_port") == "default") {
        context.node0_picks_store_port = true;
      }
    }
  }
  if (config.launcher == Launcher::k_srun) {
    throw UsageError(
        "--launcher srun starts every node of a Slurm allocation; it takes no host "
        "list (use --launcher ssh with --hosts)");
  }
  const HostsPlan plan = plan_hosts(config, command_line, context);

  ConsoleWriter console;
  if (config.dry_run) {
    print_plan(plan, console);
    return k_exit_ok;
  }
  ChannelHeader header;
  if (upstream != nullptr) {
    header = upstream->header;
  } else {
    const bool users_token =
        !config.rdzv_token_file.empty() || env.contains("DDPLAUNCH_RDZV_TOKEN");
    header.token = users_token ? load_token(config, env) : random_secret();
    header.env = forwarded_environment(env, config.env_export, config.env_forward);
  }
  if (!subtree) {
    log::debug("starting {} nodes from here; node 0 is {}:{}", plan.nnodes, plan.master_addr,
               context.master_port);
  }
  // Spares only in an elastic job (plan.cpp's rule): the hosts after MAX.
  const int max_nodes = config.elastic() ? config.nnodes : std::numeric_limits<int>::max();
  HostsLauncher launcher(signals, console, upstream, config.elastic(), max_nodes,
                         config.launcher == Launcher::k_local ? "local" : "ssh");
  // Node 0 picks its store's port where its agent was started directly (a
  // subtree's root, with its own part of the job, keeps the default).
  const bool node0_picks =
      context.node0_picks_store_port &&
      std::any_of(plan.starts.begin(), plan.starts.end(),
                  [](const AgentStart& s) { return s.node_rank == 0 && s.hosts == 1; });
  if (node0_picks) {
    launcher.hold_headers_for_store_port(header);
  }
  std::chrono::milliseconds connect_cost{0};
  if (auto it = env.find("DDPLAUNCH_SIM_CONNECT_MS"); it != env.end()) {
    connect_cost = std::chrono::milliseconds(std::clamp(std::atoi(it->second.c_str()), 0, 10'000));
  }
  launcher.start_all(plan, encode_channel_header(header), connect_cost);
  launcher.run();
  return launcher.exit_code();
}

[[noreturn]] void exec_srun_launch(const Config& config, const EnvMap& env,
                                   const std::vector<std::string>& args) {
  const int nodes = config.source_of("nnodes") == "flag" ? config.nnodes : config.slurm_nodes;
  if (nodes > config.slurm_nodes) {
    throw UsageError("--nnodes " + std::to_string(nodes) + " is more than the " +
                     std::to_string(config.slurm_nodes) +
                     " nodes of this Slurm allocation; ask sbatch/salloc for more, or use fewer");
  }
  std::vector<std::string> argv = {"srun",
                                   "--nodes=" + std::to_string(nodes),
                                   "--ntasks=" + std::to_string(nodes),
                                   "--ntasks-per-node=1",
                                   "--kill-on-bad-exit=1",
                                   self_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  log::info(
      "inside Slurm allocation {} outside any step: starting the job on {} of its nodes with "
      "srun --nodes={} --ntasks-per-node=1 (--nnodes 1 keeps it on this node)",
      env.contains("SLURM_JOB_ID") ? env.at("SLURM_JOB_ID") : std::string("?"), nodes, nodes);
  // The job's token reaches every node in srun's environment (which only
  // this user can read), never on a command line.
  std::vector<std::string> envp;
  const bool users_token = !config.rdzv_token_file.empty() || env.contains("DDPLAUNCH_RDZV_TOKEN");
  for (const auto& [name, value] : env) {
    envp.push_back(name + "=" + value);
  }
  if (!users_token) {
    envp.push_back("DDPLAUNCH_RDZV_TOKEN=" + random_secret());
  }
  std::vector<char*> a, e;
  for (auto& s : argv) {
    a.push_back(s.data());
  }
  a.push_back(nullptr);
  for (auto& s : envp) {
    e.push_back(s.data());
  }
  e.push_back(nullptr);
  ::execvpe("srun", a.data(), e.data());
  throw LaunchError(k_exit_cannot_execute,
                    std::string("cannot execute srun for the Slurm allocation: ") +
                        std::strerror(errno) + " (or run with --nnodes 1 to stay on this node)");
}

}  // namespace ddplaunch
