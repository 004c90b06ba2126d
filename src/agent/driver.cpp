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

// epoll tags: streams are 2 * local rank + stream; the others sit above.
constexpr uint64_t k_tag_signals = 1ULL << 62;
constexpr uint64_t k_tag_store = 1ULL << 61;
constexpr uint64_t k_tag_console = 1ULL << 60;
constexpr uint64_t k_tag_http = 1ULL << 59;     // --metrics-port's listener
constexpr uint64_t k_tag_waited = 1ULL << 58;   // wait_readable()'s fd
constexpr uint64_t k_tag_serve = 1ULL << 57;    // a store to serve once a client comes
constexpr uint64_t k_tag_mpi = 1ULL << 56;      // the PMIx server's queue
constexpr uint64_t k_tag_probe = 1ULL << 55;    // the network preflight's connects
constexpr uint64_t k_tag_relay = 1ULL << 54;    // the PMIx relay's sockets
constexpr uint64_t k_tag_streams = 1ULL << 53;  // | stream: the workers' pipes (StreamPump)
constexpr int k_drain_rounds = 64;              // bounded: a grandchild may still be writing
// A worker's streams in the pump: 3 * local rank + one of these.
constexpr StreamPump::Id k_stdout = 0;
constexpr StreamPump::Id k_stderr = 1;
constexpr StreamPump::Id k_progress = 2;
// How long an internal error's verdict may take to reach the store.
constexpr auto k_failure_wait = std::chrono::seconds(1);

}  // namespace

// The workers' streams go to the Agent; DDPLAUNCH_FAULT=output (`fault`)
// throws at the first bytes.
class Driver::WorkerStreams : public StreamPump::Sink {
 public:
  WorkerStreams(Agent& agent, bool fault) : m_agent(agent), m_fault(fault) {}
  void on_bytes(StreamPump::Id id, std::string_view data) override {
    if (id % 3 == k_progress) {
      m_agent.on_progress(local_rank(id));  // what it wrote only says it is alive
      return;
    }
    m_agent.on_output(local_rank(id), stream(id), data);
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
  std::optional<OutputRouter::StreamRef> reader_stream(StreamPump::Id id) override {
    if (m_fault || !m_agent.output_needs_only_router()) {
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

Driver::~Driver() = default;

Driver::Driver(posix::SignalFd& signals, ConsoleWriter& console)
    : m_signals(signals), m_console(console) {
  m_loop.set(signals.fd(), EPOLLIN, k_tag_signals);
  m_loop.set(console.wake_fd(), EPOLLIN, k_tag_console);
}

bool Driver::wait_readable(int fd, TimePoint deadline, const std::string& doing) {
  m_loop.set(fd, EPOLLIN, k_tag_waited);
  struct Forget {
    posix::EventLoop& loop;
    int fd;
    ~Forget() { loop.remove(fd); }
  } forget{m_loop, fd};
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& ready : m_loop.wait(deadline)) {
      if (ready.tag == k_tag_waited) {
        return true;
      }
      if (ready.tag == k_tag_console) {
        m_console.read_wake();
      }
      if (ready.tag != k_tag_signals) {
        continue;
      }
      // One policy (supervise/signal_policy.hpp): SIGUSR1/2 have no worker
      // to reach yet and are dropped; a stop signal ends the wait.
      while (auto sig = m_signals.read_one()) {
        if (is_stop_signal(*sig)) {
          throw LaunchError(
              128 + *sig, std::string("stopped by signal ") + strsignal(*sig) + " while " + doing);
        }
      }
    }
  }
  return false;
}

void Driver::serve_when_connected(int listen_fd, std::function<void()> serve) {
  m_serve_fd = listen_fd;
  m_serve = std::move(serve);
  m_loop.set(listen_fd, EPOLLIN, k_tag_serve);
}

void Driver::watch_mpi(int fd) {
  m_loop.set(fd, EPOLLIN, k_tag_mpi);
}

void Driver::watch_client(AsyncClient* store) {
  if (m_link == nullptr) {
    m_store = store;
  }
}

void Driver::watch_http(int fd, std::function<void()> serve) {
  m_http = std::move(serve);
  m_loop.set(fd, EPOLLIN, k_tag_http);
}

void Driver::watch_relay(int fd, std::function<void()> pump) {
  m_relay = std::move(pump);
  m_loop.set(fd, EPOLLIN, k_tag_relay);
}

void Driver::run(Agent& agent, ProcessSpawner& spawner, StoreLink* link, AsyncClient* store,
                 bool fault) {
  m_agent = &agent;
  m_spawner = &spawner;
  m_link = link;
  m_store = store;
  m_sink = std::make_unique<WorkerStreams>(agent, fault);
  m_pump = std::make_unique<StreamPump>(m_loop, k_tag_streams, m_console, *m_sink, &agent.router());
  // The reader threads go before run() does: they take lines into the agent's router.
  struct StopReaders {
    StreamPump& pump;
    ~StopReaders() { pump.stop_readers(); }
  } stop_readers{*m_pump};
  while (!m_agent->done()) {
    sync_fds();
    m_pump->set_bounded(m_agent->workers_ended());
    for (const auto& ready : m_loop.wait(next_deadline())) {
      dispatch(ready);
      if (m_agent->done()) {
        return;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (m_store != nullptr) {
      m_store->on_time(now);
    }
    if (m_link != nullptr) {
      m_link->on_time(now);
      if (m_probe != nullptr) {
        m_probe->on_time(now);
      }
    }
    m_agent->on_time();
  }
}

std::optional<Driver::TimePoint> Driver::next_deadline() const {
  std::optional<TimePoint> deadline = m_agent->next_deadline();
  auto consider = [&deadline](std::optional<TimePoint> t) {
    if (t && (!deadline || *t < *deadline)) {
      deadline = t;
    }
  };
  if (m_store != nullptr) {
    consider(m_store->deadline());
  }
  if (m_link != nullptr) {
    consider(m_link->deadline());
    if (m_probe != nullptr) {
      consider(m_probe->deadline());
    }
  }
  return deadline;
}

void Driver::publish_failure(const std::string& message) {
  if (m_link == nullptr) {
    return;
  }
  try {
    m_link->publish_stop(JobVerdict{k_exit_internal, message, std::nullopt, -1});
    m_link->abandon();
    const auto until = std::chrono::steady_clock::now() + k_failure_wait;
    while (!(m_link->stop_confirmed() && m_link->abandoned()) && !m_store->failed() &&
           std::chrono::steady_clock::now() < until) {
      sync_store_fd();
      auto deadline = m_store->deadline().value_or(until);
      for (const auto& ready : m_loop.wait(std::min(deadline, until))) {
        if (ready.tag == k_tag_store) {
          m_store->on_ready(ready.events, std::chrono::steady_clock::now());
        } else if (ready.tag == k_tag_console) {
          m_console.read_wake();
        }
        // signals and worker output wait: the launcher is leaving
      }
      const auto now = std::chrono::steady_clock::now();
      m_store->on_time(now);
      m_link->on_time(now);
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

void Driver::sync_fds() {
  sync_worker_fds();  // first: a new round's pipes may take numbers the store's socket then re-adds
  sync_store_fd();
  sync_probe_fd();
}

// The probe's epoll is one fd, open for the probe's life: watched only while
// its connects are in flight.
void Driver::sync_probe_fd() {
  if (m_probe == nullptr) {
    return;
  }
  const int fd = m_probe->fd();
  if (fd >= 0 && m_probe_fd < 0) {
    m_loop.set(fd, EPOLLIN, k_tag_probe);
    m_probe_fd = fd;
  } else if (fd < 0 && m_probe_fd >= 0) {
    m_loop.remove(m_probe_fd);
    m_probe_fd = -1;
  }
}

void Driver::sync_store_fd() {
  if (m_store == nullptr) {
    return;
  }
  // One socket; a new one for each connect attempt, which the client closes
  // itself. A closed socket's registration went with it, and its number is
  // the next socket's as often as not: under the same number and events, an
  // attempt that timed out left every later one unwatched (each then timed
  // out in turn, though the store answered). Nor may its number be taken
  // from the loop blindly: another fd (a worker's pipe) may hold it now.
  const int fd = m_store->events() != 0 ? m_store->fd() : -1;
  const int attempt = m_store->attempts();
  if (m_store_fd >= 0 && (m_store_fd != fd || m_store_attempt != attempt)) {
    m_loop.forget_closed(m_store_fd, k_tag_store);
  }
  m_store_fd = fd;
  m_store_attempt = attempt;
  if (fd >= 0) {
    m_loop.set(fd, m_store->events(), k_tag_store);
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

void Driver::dispatch(const posix::EventLoop::Ready& ready) {
  if (ready.tag == k_tag_signals) {
    while (auto got = m_signals.read_info()) {
      if (got->signo == SIGCHLD) {
        reap();
      } else {
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
        m_agent->on_signal(got->signo, from);
      }
    }
  } else if (ready.tag == k_tag_console) {
    m_console.read_wake();
    m_pump->on_console_room();
  } else if (m_pump->owns(ready.tag)) {
    m_pump->on_ready(ready.tag);
  } else if (ready.tag == k_tag_serve) {
    m_loop.remove(m_serve_fd);
    m_serve_fd = -1;
    std::exchange(m_serve, nullptr)();
  } else if (ready.tag == k_tag_store) {
    m_store->on_ready(ready.events, std::chrono::steady_clock::now());
  } else if (ready.tag == k_tag_mpi) {
    m_agent->on_mpi();
  } else if (ready.tag == k_tag_relay) {
    m_relay();
  } else if (ready.tag == k_tag_http) {
    m_http();
  } else if (ready.tag == k_tag_probe) {
    m_probe->on_ready(std::chrono::steady_clock::now());
  }
}

void Driver::reap() {
  while (auto reaped = reap_any()) {
    // A round may have started within this batch of events, or within this
    // loop (the last exit handled ended the round and the Agent restarted
    // it), and its workers may have ended already: their pipes go into the
    // pump first, so that what they wrote is read before their exit is
    // handled.
    sync_worker_fds();
    if (auto dumped = m_spawner->debugger_of(reaped->first)) {
      m_agent->on_stacks_dumped(*dumped, reaped->first);
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
