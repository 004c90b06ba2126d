#include "launcher/hosts_launcher.hpp"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "supervise/exit_info.hpp"
#include "supervise/signal_policy.hpp"

namespace ddplaunch {

namespace {

constexpr uint64_t k_tag_upstream = 1ULL << 60;
constexpr uint64_t k_tag_in = 1ULL << 59;       // | index: a started process's stdin
constexpr uint64_t k_tag_streams = 1ULL << 58;  // | stream: their stdout and stderr (StreamPump)
// The outer loop's (run_hosts_launcher()), above every tag of the launcher's.
constexpr uint64_t k_tag_signals = 1ULL << 62;
constexpr uint64_t k_tag_console = 1ULL << 61;
static_assert(k_tag_console >= HostsLauncher::k_tags_below);

constexpr int k_ssh_unreachable = 255;  // ssh's own exit code for its failures

}  // namespace

HostsLauncher::HostsLauncher(posix::EventLoop& loop, ChildStarter& starter, const Clock& clock,
                             ConsoleSink& console, AgentChannel* upstream, Options options)
    : m_loop(loop),
      m_starter(starter),
      m_clock(clock),
      m_console(console),
      m_upstream(upstream),
      m_options(std::move(options)),
      m_pump(loop, k_tag_streams, console, *this) {
  if (m_upstream != nullptr) {
    posix::set_nonblocking(m_upstream->fd.get());
    m_loop.set(m_upstream->fd.get(), EPOLLIN, k_tag_upstream);
  }
}

// Ended early (an error): every channel closes first, so each agent stops
// its workers as its channel's end tells it to; each Child then goes.
HostsLauncher::~HostsLauncher() {
  if (m_upstream != nullptr && m_upstream->fd) {
    m_loop.remove(m_upstream->fd.get());
  }
  for (auto& s : m_started) {
    if (s.child.in()) {
      m_loop.remove(s.child.in().get());
      s.child.in().close();
    }
  }
}

void HostsLauncher::start_all(const HostsPlan& plan, std::string header,
                              std::chrono::milliseconds connect_cost) {
  m_plan = plan.starts;
  m_header = std::move(header);
  m_connect_cost = connect_cost;
  m_started.reserve(m_plan.size());
  m_total_nodes = 0;
  for (const auto& s : m_plan) {
    m_total_nodes += s.hosts;
  }
  m_started_at = m_clock.now();
  m_next_progress = m_started_at + k_progress_after;
  m_next_start = m_started_at + connect_cost;
  if (m_upstream != nullptr) {
    m_sent += m_upstream->pending;  // signals that came with the header
    m_upstream->pending.clear();
  }
  start_due(m_started_at);
}

bool HostsLauncher::starting() const {
  return m_started.size() < m_plan.size() && !m_failed && !m_stop_signal && !m_stopping;
}

// A host after --nnodes MAX: it starts as a hot spare (no node rank).
bool HostsLauncher::spare(const Started& s) const {
  return s.start.hosts == 1 && s.start.node_rank >= m_options.max_nodes;
}

bool HostsLauncher::done() const {
  if (starting()) {
    return false;
  }
  for (size_t i = 0; i < m_started.size(); ++i) {
    const auto out = static_cast<StreamPump::Id>(2 * i);
    if (!m_started[i].exit || m_pump.is_open(out) || m_pump.is_open(out + 1)) {
      return false;
    }
  }
  return true;
}

// Starts what is due by `now`: each connection of a simulation one
// connect_cost after the one before.
void HostsLauncher::start_due(TimePoint now) {
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

void HostsLauncher::start_one(const AgentStart& s) {
  ChildStart spec;
  spec.argv = s.argv;
  spec.stdin_pipe = true;
  Child child = m_starter.start(spec);
  const size_t index = m_started.size();
  const auto id = static_cast<StreamPump::Id>(2 * index);
  m_pump.add(id, std::move(child.out()), 1);
  m_pump.add(id + 1, std::move(child.err()), 2);
  Started& started = m_started.emplace_back(s, std::move(child));
  started.held = m_held_header && s.node_rank != 0;
  started.to_write = started.held ? std::string() : m_header + m_sent;
  flush_in(index);
}

void HostsLauncher::on_ready(const posix::EventLoop::Ready& ready) {
  if (m_pump.owns(ready.tag)) {
    m_pump.on_ready(ready.tag);
  } else if (ready.tag == k_tag_upstream) {
    read_upstream();
  } else if ((ready.tag & k_tag_in) != 0) {
    const size_t index = ready.tag & ~k_tag_in;
    if (index < m_started.size()) {
      flush_in(index);
    }
  }
}

void HostsLauncher::on_signal(int sig) {
  if (sig != SIGCHLD) {
    // Every agent acts on it as if it had received it: a stop signal ends
    // the job on every node, SIGUSR1/2 reach every worker.
    send_to_all(std::string(1, static_cast<char>(sig)));
    return;
  }
  while (auto reaped = m_starter.reap()) {
    for (auto& s : m_started) {
      if (s.child.pid() == reaped->first && !s.exit) {
        s.child.mark_reaped();
        s.exit = reaped->second;
        on_exit(s);
      }
    }
    stop_idle_spares();
  }
}

bool HostsLauncher::telling_progress() const {
  // A subtree's progress is its root's to tell.
  return m_ready_nodes < m_total_nodes && !m_failed && m_upstream == nullptr;
}

std::optional<HostsLauncher::TimePoint> HostsLauncher::next_deadline() const {
  std::optional<TimePoint> deadline;
  auto consider = [&deadline](TimePoint t) { deadline = std::min(deadline.value_or(t), t); };
  if (telling_progress()) {
    consider(m_next_progress);
  }
  if (starting() && m_connect_cost.count() > 0) {
    consider(m_next_start);
  }
  if (m_stop_at && !m_stop_sent) {
    consider(*m_stop_at);
  }
  return deadline;
}

void HostsLauncher::on_time() {
  const auto now = m_clock.now();
  if (m_stop_at && !m_stop_sent && now >= *m_stop_at && !done()) {
    if (m_node_0_lost) {
      // What is left is node 0's connection, which its host no longer
      // answers: the closing report says what happened.
      log::debug("{} and the other nodes still run: stopping them", m_stop_reason);
    } else {
      log::warn("{} and the other nodes still run: stopping them", m_stop_reason);
    }
    send_to_all(std::string(1, k_channel_stop));
    m_stop_sent = true;
  }
  start_due(now);
  if (telling_progress() && now >= m_next_progress) {
    say_progress();
  }
}

int HostsLauncher::exit_code() const {
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
  if (m_stop_signal) {
    return 128 + *m_stop_signal;
  }
  const bool lost = std::any_of(m_started.begin(), m_started.end(), [this](const Started& s) {
    return s.exit && !s.exit->success() && !spare(s);
  });
  return lost ? k_exit_node_lost : k_exit_ok;
}

std::string HostsLauncher::closing_report() const {
  if (!m_node_0_lost || m_upstream != nullptr) {
    return {};
  }
  std::string node_0 = "node 0";
  for (const Started& s : m_started) {
    if (s.start.node_rank == 0 && s.start.hosts == 1) {
      node_0 = describe_start(s.start);
    }
  }
  return fmt::format(
      "ddplaunch: job failed: {} was lost (its host died, or its agent was killed): {}; every "
      "other node stopped its workers\nddplaunch: exit code {}\n",
      node_0, *m_node_0_lost, exit_code());
}

// Once every member of the job (every host up to MAX) has ended, the
// spares still waiting for a place are stopped (quietly: the job said how
// it ended), and those not started yet never start.
void HostsLauncher::stop_idle_spares() {
  if (m_job_over || m_options.max_nodes >= static_cast<int>(m_plan.size())) {
    return;
  }
  for (size_t i = 0; i < m_plan.size(); ++i) {
    const bool member = m_plan[i].hosts > 1 || m_plan[i].node_rank < m_options.max_nodes;
    if (member && (i >= m_started.size() || !m_started[i].exit)) {
      return;
    }
  }
  m_job_over = true;
  log::debug("every member of the job has ended: stopping the spares");
  send_to_all(std::string(1, k_channel_stop));
}

void HostsLauncher::send_to_all(const std::string& bytes) {
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
    if (s.child.in() && !s.exit && !s.held) {
      s.to_write += bytes;
      flush_in(i);
    }
  }
}

// The held headers go out, with node 0's store port (0: the command line's),
// followed by the channel bytes sent so far.
void HostsLauncher::release_headers(int store_port) {
  ChannelHeader header = std::move(*m_held_header);
  m_held_header.reset();
  header.store_port = store_port;
  m_header = encode_channel_header(header);
  for (size_t i = 0; i < m_started.size(); ++i) {
    Started& s = m_started[i];
    if (s.held) {
      s.held = false;
      s.to_write = m_header + m_sent;
      flush_in(i);
    }
  }
}

void HostsLauncher::read_upstream() {
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
      if (s.child.in()) {
        m_loop.remove(s.child.in().get());
        s.child.in().close();
      }
    }
    return;
  }
}

void HostsLauncher::flush_in(size_t index) {
  Started& s = m_started[index];
  posix::Fd& in = s.child.in();
  while (!s.to_write.empty() && in) {
    const ssize_t n = ::write(in.get(), s.to_write.data(), s.to_write.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      m_loop.set(in.get(), EPOLLOUT, k_tag_in | index);
      return;
    }
    if (n < 0) {
      // It ended (EPIPE): nothing more reaches it.
      m_loop.remove(in.get());
      in.close();
      s.to_write.clear();
      return;
    }
    s.to_write.erase(0, static_cast<size_t>(n));
  }
  if (in && m_loop.contains(in.get())) {
    m_loop.remove(in.get());
  }
}

void HostsLauncher::on_exit(Started& s) {
  // What it wrote just before it exited is in its pipes when its exit is
  // seen: ssh's last line ("Connection to node1 closed by remote host.")
  // explains a drop, so it is read first (a few reads: a process it left
  // behind may still be writing).
  const auto out = static_cast<StreamPump::Id>(2 * static_cast<size_t>(&s - m_started.data()));
  for (const StreamPump::Id id : {out, static_cast<StreamPump::Id>(out + 1)}) {
    for (int reads = 0; reads < 16 && m_pump.read(id); ++reads) {
    }
  }
  if (s.child.in()) {
    m_loop.remove(s.child.in().get());
    s.child.in().close();
  }
  if (s.start.node_rank == 0 && m_held_header) {
    release_headers(0);  // it never said its port: the others are stopped below
  }
  // ssh's own failures (255: no connection; 127: no ddplaunch there) are
  // the host's, whatever else happened meanwhile.
  const bool ssh_failed = !s.start.local && !s.exit->by_signal() &&
                          (s.exit->code() == k_ssh_unreachable || s.exit->code() == 127);
  if (s.ready < s.start.hosts && (m_stop_signal || m_stopping) && !ssh_failed) {
    // This command stopped it before it said it started (Ctrl-C while
    // connecting, a host that could not be started): not a failure of its own.
    log::debug("{} ended with {} as it was stopped", describe_start(s.start), s.exit->describe());
  } else if (s.ready < s.start.hosts) {
    on_start_failed(s);
  } else if (m_stop_signal || m_stopping) {
    // This command stopped the job (a signal it relayed, a host that could
    // not start, the grace stop): how each node then ends is its doing,
    // neither a failure of that node nor a dropped connection.
    log::debug("{} ended with {} as it was stopped", describe_start(s.start), s.exit->describe());
  } else if (!s.start.local && !s.exit->by_signal() && s.exit->code() == k_ssh_unreachable) {
    log::warn("the ssh connection to {} dropped{}: the agents there stop their workers",
              describe_start(s.start), s.ssh_said.empty() ? "" : " (" + s.ssh_said + ")");
  } else if (!s.exit->success()) {
    on_agent_failed(s);
  }
}

// `s` ended before every node it starts said so: it could not be started
// (ssh could not connect, ddplaunch is missing there, ...). A fixed-size job
// cannot run without it: every other node is stopped.
void HostsLauncher::on_start_failed(const Started& s) {
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
  if (m_options.elastic) {
    log::warn("{} could not be started: {}; the job goes on without it", describe_start(s.start),
              why);
    return;
  }
  log::error("{} could not be started: {}; stopping the job on every node", describe_start(s.start),
             why);
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
void HostsLauncher::on_agent_failed(const Started& s) {
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
  if (!m_options.elastic && !m_stop_at) {
    m_stop_at = m_clock.now() + k_stop_grace;
    m_stop_reason = describe_start(s.start) + " ended with " + s.exit->describe();
  }
}

void HostsLauncher::say_progress() {
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
  log::info("{}: {}/{} connected, waiting for {}", m_options.via, m_ready_nodes, m_total_nodes,
            waiting);
  m_next_progress = m_clock.now() + k_progress_every;
}

void run_hosts_launcher(HostsLauncher& launcher, posix::EventLoop& loop, posix::SignalFd& signals,
                        ConsoleWriter& console) {
  loop.set(signals.fd(), EPOLLIN, k_tag_signals);
  loop.set(console.wake_fd(), EPOLLIN, k_tag_console);
  while (!launcher.done()) {
    for (const auto& ready : loop.wait(launcher.next_deadline())) {
      if (ready.tag == k_tag_signals) {
        while (auto sig = signals.read_one()) {
          launcher.on_signal(*sig);
        }
      } else if (ready.tag == k_tag_console) {
        console.read_wake();
        launcher.on_console_room();
      } else if (launcher.owns(ready.tag)) {
        launcher.on_ready(ready);
      }
    }
    launcher.on_time();
  }
}

}  // namespace ddplaunch
