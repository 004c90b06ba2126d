#include "agent/driver.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "config/launch_error.hpp"
#include "launcher/agent_channel.hpp"
#include "log.hpp"
#include "proc/reap.hpp"
#include "supervise/signal_policy.hpp"

namespace ddplaunch {

namespace {

// The Driver's own tags, under its base.
constexpr uint64_t k_tag_signals = 1;
constexpr uint64_t k_tag_console = 2;
constexpr uint64_t k_tag_serve = 3;   // a store to serve once a client comes
constexpr uint64_t k_tag_waited = 4;  // wait_readable()'s fd
constexpr int k_drain_rounds = 64;    // bounded: a grandchild may still be writing
// A worker's streams in the pump: 3 * local rank + one of these.
constexpr StreamPump::Id k_stdout = 0;
constexpr StreamPump::Id k_stderr = 1;
constexpr StreamPump::Id k_progress = 2;
// How long an internal error's verdict may take to reach the store.
constexpr auto k_failure_wait = std::chrono::seconds(1);

}  // namespace

// The workers' streams: their bytes straight into the router (the progress
// pipe's, which only say a rank is alive, to the Agent); their ends and
// pauses to the Agent, whose round they are part of. DDPLAUNCH_FAULT=output
// (`fault`) throws at the first bytes.
class Driver::WorkerStreams : public StreamPump::Sink {
 public:
  WorkerStreams(Agent& agent, bool fault) : m_agent(agent), m_fault(fault) {}
  void on_bytes(StreamPump::Id id, std::string_view data) override {
    if (id % 3 == k_progress) {
      m_agent.on_progress(local_rank(id));  // what it wrote only says it is alive
      return;
    }
    m_agent.router().on_data(local_rank(id), stream(id), data);
    if (m_fault) {
      throw std::runtime_error("the fault DDPLAUNCH_FAULT=output asked for");
    }
  }
  void on_closed(StreamPump::Id id) override {
    if (id % 3 != k_progress) {
      m_agent.on_output_closed(local_rank(id), stream(id));
    }
  }
  void on_paused(StreamPump::Id id, bool paused) override {
    m_agent.on_output_paused(local_rank(id), paused);
  }
  // A flooding stream may be read on a reader thread, straight into the
  // router, unless the streams share a filter file or the hang watch must
  // see its pauses.
  std::optional<OutputRouter::StreamRef> reader_stream(StreamPump::Id id) override {
    if (m_fault || !m_agent.router().streams_independent() || m_agent.watches_hangs()) {
      return std::nullopt;
    }
    return m_agent.router().stream_ref(local_rank(id), stream(id));
  }

 private:
  static int local_rank(StreamPump::Id id) { return static_cast<int>(id / 3); }
  static OutputRouter::Stream stream(StreamPump::Id id) {
    return id % 3 == k_stdout ? OutputRouter::Stream::k_out : OutputRouter::Stream::k_err;
  }
  Agent& m_agent;
  bool m_fault;
};

Driver::~Driver() {
  m_pump.reset();
  m_loop.detach(*this);
}

Driver::Driver(posix::SignalFd& signals, ConsoleWriter& console)
    : m_signals(signals), m_console(console), m_tag(m_loop.attach(*this)) {
  m_loop.set(signals.fd(), EPOLLIN, m_tag | k_tag_signals);
  m_loop.set(console.wake_fd(), EPOLLIN, m_tag | k_tag_console);
}

void Driver::read_signals_while(const std::string& doing) {
  // One policy (supervise/signal_policy.hpp): SIGUSR1/2 have no worker to
  // reach yet and are dropped; a stop signal ends the wait.
  while (auto sig = m_signals.read_one()) {
    if (is_stop_signal(*sig)) {
      throw LaunchError(128 + *sig,
                        std::string("stopped by signal ") + strsignal(*sig) + " while " + doing);
    }
    m_reap_due = m_reap_due || *sig == SIGCHLD;
  }
}

bool Driver::wait_readable(int fd, TimePoint deadline, const std::string& doing) {
  m_loop.set(fd, EPOLLIN, m_tag | k_tag_waited);
  struct Forget {
    posix::EventLoop& loop;
    int fd;
    ~Forget() { loop.remove(fd); }
  } forget{m_loop, fd};
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& ready : m_loop.wait(deadline)) {
      if (ready.tag == (m_tag | k_tag_waited)) {
        return true;
      }
      if (ready.tag == (m_tag | k_tag_console)) {
        m_console.read_wake();
      } else if (ready.tag == (m_tag | k_tag_signals)) {
        read_signals_while(doing);
      }
    }
  }
  return false;
}

std::optional<ExitInfo> Driver::wait_child(Child& child,
                                           const std::function<void(std::string_view)>& on_output,
                                           TimePoint deadline, const std::string& doing) {
  struct Output : StreamPump::Sink {
    const std::function<void(std::string_view)>& to;
    explicit Output(const std::function<void(std::string_view)>& f) : to(f) {}
    void on_bytes(StreamPump::Id, std::string_view data) override { to(data); }
    void on_closed(StreamPump::Id) override {}
  } output(on_output);
  StreamPump pump(m_loop, m_console, output);
  if (child.out()) {
    pump.add(0, std::move(child.out()), 0);  // 0: never paused for the console
  }
  std::optional<ExitInfo> ended;
  m_reap_due = true;  // a SIGCHLD may have come before the pump was set up
  while (!ended) {
    if (m_reap_due) {
      m_reap_due = false;
      while (auto reaped = reap_any()) {
        if (reaped->first == child.pid()) {
          ended = reaped->second;
        } else {
          m_reaped_early.push_back(*reaped);
        }
      }
      if (ended) {
        break;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return std::nullopt;
    }
    for (const auto& ready : m_loop.wait(deadline)) {
      if (pump.owns(ready.tag)) {
        pump.on_ready(ready.tag);
      } else if (ready.tag == (m_tag | k_tag_console)) {
        m_console.read_wake();
      } else if (ready.tag == (m_tag | k_tag_signals)) {
        read_signals_while(doing);
      }
    }
  }
  // What its pipe holds now; a process it left behind may write on.
  for (int round = 0; round < k_drain_rounds && pump.read(0); ++round) {
  }
  return ended;
}

void Driver::serve_when_connected(int listen_fd, std::function<void()> serve) {
  m_serve_fd = listen_fd;
  m_serve = std::move(serve);
  m_loop.set(listen_fd, EPOLLIN, m_tag | k_tag_serve);
}

void Driver::run(Agent& agent, WorkerChildren& spawner, bool fault) {
  m_agent = &agent;
  m_spawner = &spawner;
  m_sink = std::make_unique<WorkerStreams>(agent, fault);
  m_pump = std::make_unique<StreamPump>(m_loop, m_console, *m_sink, &agent.router());
  // The reader threads go before run() does: they take lines into the agent's router.
  struct StopReaders {
    StreamPump& pump;
    ~StopReaders() { pump.stop_readers(); }
  } stop_readers{*m_pump};
  while (!m_agent->done()) {
    m_loop.turn(m_agent->next_deadline(), {}, [this] { return m_agent->done(); });
    if (m_agent->done()) {
      return;
    }
    m_agent->on_time();
  }
}

void Driver::publish_failure(StoreLink* link, ClientOnLoop* store, const std::string& message) {
  if (link == nullptr || store == nullptr) {
    return;
  }
  try {
    link->publish_stop(JobVerdict{k_exit_internal, message, std::nullopt, -1});
    link->abandon();
    const auto until = std::chrono::steady_clock::now() + k_failure_wait;
    while (!(link->stop_confirmed() && link->abandoned()) && !store->client().failed() &&
           std::chrono::steady_clock::now() < until) {
      store->prepare();
      const auto deadline = store->deadline().value_or(until);
      for (const auto& ready : m_loop.wait(std::min(deadline, until))) {
        if (m_loop.owner_of(ready.tag) == store) {
          store->on_ready(ready.tag, ready.events);
        } else if (ready.tag == (m_tag | k_tag_console)) {
          m_console.read_wake();
        }
        // signals and worker output wait: the launcher is leaving
      }
      const auto now = std::chrono::steady_clock::now();
      store->on_time(now);
      link->on_time(now);
    }
  } catch (const std::exception& e) {
    log::debug("could not tell the other nodes: {}", e.what());
  }
}

std::optional<int> Driver::drain() {
  std::optional<int> stopped_by;
  m_console.finish([this, &stopped_by] {
    while (auto sig = m_signals.read_one()) {
      if (is_stop_signal(*sig)) {
        stopped_by = sig;
        return true;
      }
    }
    return false;
  });
  return stopped_by;
}

// Before each wait: a new round's pipes into the pump (before any other
// owner's prepare(): they may take numbers a store socket then re-adds),
// and whether what is left in them is bounded.
void Driver::prepare() {
  if (m_pump != nullptr) {
    sync_worker_fds();
    m_pump->set_bounded(m_agent->workers_ended());
    if (m_reap_due || !m_reaped_early.empty()) {
      m_reap_due = false;
      reap();  // a SIGCHLD a wait read, or children wait_child() reaped: told now
    }
  }
}

void Driver::sync_worker_fds() {
  if (m_spawner->generation() == m_generation_watched) {
    return;  // workers start once a round; their pipes leave the loop as they close
  }
  // A new round's workers: the last round's pipes go (their workers ended).
  m_generation_watched = m_spawner->generation();
  m_pump->clear();
  auto& children = m_spawner->children();
  for (size_t i = 0; i < children.size(); ++i) {
    const auto base = static_cast<StreamPump::Id>(3 * i);
    if (children[i].out()) {
      m_pump->add(base + k_stdout, std::move(children[i].out()), 1);
    }
    if (children[i].err()) {
      m_pump->add(base + k_stderr, std::move(children[i].err()), 2);
    }
    if (children[i].progress()) {
      m_pump->add(base + k_progress, std::move(children[i].progress()), 0);
    }
  }
}

void Driver::on_ready(uint64_t tag, uint32_t) {
  switch (tag - m_tag) {
    case k_tag_signals:
      on_signals();
      return;
    case k_tag_console:
      m_console.read_wake();
      if (m_pump != nullptr) {
        m_pump->on_console_room();
      }
      return;
    case k_tag_serve:
      m_loop.remove(m_serve_fd);
      m_serve_fd = -1;
      std::exchange(m_serve, nullptr)();
      return;
    default:
      return;  // wait_readable()'s, read there
  }
}

void Driver::on_signals() {
  while (auto got = m_signals.read_info()) {
    if (got->signo == SIGCHLD) {
      reap();
      continue;
    }
    // Slurm's slurmstepd signals every process of the job step, the
    // workers too (scancel --signal, sbatch --signal, a preemption); the
    // launching command's signals are raised by this process's own
    // channel thread (launcher/agent_channel.hpp).
    using From = Agent::SignalFrom;
    const From from =
        got->sender == ::getpid() ? (agent_channel_ended()        ? From::k_cut_off
                                     : agent_stopped_by_command() ? From::k_stopped_by_command
                                                                  : From::k_launching_command)
        : got->sender > 0 && posix::process_name(got->sender) == "slurmstepd" ? From::k_slurm
                                                                              : From::k_anyone;
    if (m_agent != nullptr) {
      m_agent->on_signal(got->signo, from);
    }
  }
}

std::optional<std::pair<pid_t, ExitInfo>> Driver::next_reaped() {
  if (!m_reaped_early.empty()) {
    auto first = m_reaped_early.front();
    m_reaped_early.erase(m_reaped_early.begin());
    return first;
  }
  return m_spawner->reap();
}

void Driver::reap() {
  while (auto reaped = next_reaped()) {
    // A round may have started within this batch of events, or within this
    // loop (the last exit handled ended the round and the Agent restarted
    // it), and its workers may have ended already: their pipes go into the
    // pump first, so that what they wrote is read before their exit is
    // handled.
    sync_worker_fds();
    if (auto dumped = m_spawner->debugger_of(reaped->first)) {
      if (!m_debuggers || !m_debuggers(reaped->first)) {
        m_agent->on_stacks_dumped(*dumped, reaped->first);
      }
      continue;
    }
    auto lr = m_spawner->local_rank_of(reaped->first);
    if (!lr) {
      continue;  // a reparented orphan (we are a subreaper)
    }
    m_spawner->children()[static_cast<size_t>(*lr)].mark_reaped();
    // What is already in its pipes comes first, so its last stderr lines
    // are known before the failure is reported.
    // Its last progress too (--restart-min-progress judges the round by it).
    for (const StreamPump::Id kind : {k_stdout, k_stderr, k_progress}) {
      const auto id = static_cast<StreamPump::Id>(3 * *lr) + kind;
      for (int round = 0; round < k_drain_rounds && m_pump->read(id); ++round) {
      }
    }
    m_agent->on_worker_exit(*lr, reaped->second);
  }
}

}  // namespace ddplaunch
