#include "agent/driver.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "ddplaunch/error.hpp"
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
constexpr uint64_t k_tag_progress = 1ULL << 59;  // | local rank: its DDPLAUNCH_PROGRESS_FD pipe
constexpr uint64_t k_tag_waited = 1ULL << 58;    // wait_readable()'s fd
constexpr uint64_t k_tag_serve = 1ULL << 57;     // a store to serve once a client comes
constexpr uint64_t k_tag_mpi = 1ULL << 56;       // the PMIx server's queue
constexpr uint64_t k_tag_probe = 1ULL << 55;     // the network preflight's connects
constexpr uint64_t k_tag_relay = 1ULL << 54;     // the PMIx relay's sockets
constexpr uint64_t k_tag_readers = 1ULL << 53;   // streams that ended on a reader thread
// A read this large means the worker filled its pipe; then it gets this size.
constexpr size_t k_pipe_size_at = 64 * 1024;
constexpr int k_drain_rounds = 64;  // bounded: a grandchild may still be writing
// How long an internal error's verdict may take to reach the store.
constexpr auto k_failure_wait = std::chrono::seconds(1);

}  // namespace

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
  m_fault = fault;
  // The reader threads go before run() does: they take lines into the agent's router.
  struct StopReaders {
    std::unique_ptr<StreamReaders>& readers;
    ~StopReaders() {
      if (readers) {
        readers->stop();
      }
    }
  } stop_readers{m_readers};
  while (!m_agent->done()) {
    sync_fds();
    if (m_agent->workers_ended()) {
      resume_streams(true);  // what is left in the pipes is bounded: read it now
      if (m_readers) {
        m_readers->set_unbounded();
      }
    }
    for (const auto& ready : m_loop.wait(next_deadline())) {
      dispatch(ready);
      if (m_agent->done()) {
        return;
      }
    }
    if (m_link != nullptr) {
      const auto now = std::chrono::steady_clock::now();
      m_store->on_time(now);
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
  if (m_link != nullptr) {
    consider(m_link->deadline());
    consider(m_store->deadline());
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
  // A new round's workers: the last round's pipes are closed, and their
  // numbers may be the new ones'.
  m_generation_watched = m_spawner->generation();
  for (int fd : m_worker_fds) {
    m_loop.forget_closed(fd);  // the spawner closed them with their round
  }
  m_worker_fds.clear();
  m_paused.clear();
  m_handed.clear();  // the reader threads stopped reading them when the round closed them
  m_grown.clear();   // the same tags name new pipes
  auto& children = m_spawner->children();
  for (size_t i = 0; i < children.size(); ++i) {
    for (int s = 0; s < 2; ++s) {
      posix::Fd& fd = s == 0 ? children[i].out() : children[i].err();
      if (fd) {
        m_loop.set(fd.get(), EPOLLIN, 2 * i + static_cast<uint64_t>(s));
        m_worker_fds.insert(fd.get());
      }
    }
    if (posix::Fd& fd = children[i].progress()) {
      m_loop.set(fd.get(), EPOLLIN, k_tag_progress | i);
      m_worker_fds.insert(fd.get());
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
    resume_streams(false);
  } else if ((ready.tag & k_tag_progress) != 0) {
    read_progress(static_cast<int>(ready.tag & ~k_tag_progress));
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
  } else if (ready.tag == k_tag_readers) {
    take_ended_streams();
  } else if (ready.tag == k_tag_probe) {
    m_probe->on_ready(std::chrono::steady_clock::now());
  } else {
    read_stream(static_cast<int>(ready.tag / 2), static_cast<Stream>(ready.tag % 2));
  }
}

// What a worker wrote to its progress pipe only says it is alive. True when
// something was read.
bool Driver::read_progress(int local_rank) {
  posix::Fd& fd = m_spawner->children().at(static_cast<size_t>(local_rank)).progress();
  if (!fd) {
    return false;
  }
  ssize_t n = ::read(fd.get(), m_buffer.get(), k_read_size);
  if (n > 0) {
    m_agent->on_progress(local_rank);
    return true;
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    m_loop.forget_closed(fd.get());
    m_worker_fds.erase(fd.get());
    fd.close();
  }
  return false;
}

// Reads one chunk; false when nothing more is there now.
bool Driver::read_stream(int local_rank, Stream stream) {
  auto& child = m_spawner->children().at(static_cast<size_t>(local_rank));
  posix::Fd& fd = stream == Stream::k_out ? child.out() : child.err();
  if (!fd) {
    return false;
  }
  const uint64_t tag = 2 * static_cast<uint64_t>(local_rank) + static_cast<uint64_t>(stream);
  if (auto handed = m_handed.find(tag); handed != m_handed.end()) {
    // A reader thread's: read here under its lock (an ended worker's last lines).
    const int r = m_readers->read_now(*handed->second, m_buffer.get(), k_read_size);
    if (r < 0) {
      m_handed.erase(handed);
      close_stream(local_rank, stream);
    }
    return r > 0;
  }
  ssize_t n = ::read(fd.get(), m_buffer.get(), k_read_size);
  if (n > 0) {
    m_agent->on_output(local_rank, stream,
                       std::string_view(m_buffer.get(), static_cast<size_t>(n)));
    if (m_fault) {
      throw std::runtime_error("the fault DDPLAUNCH_FAULT=output asked for");
    }
    if (n >= static_cast<ssize_t>(k_pipe_size_at) && m_grown.insert(tag).second) {
      // A worker that fills its pipe (64 KiB) gets a larger one: a flood then
      // costs the worker and the launcher a wake-up per 128 KiB, not per 64
      // KiB (larger pipes measured slower: their pages fall out of the CPU's
      // cache). Only such a stream pays the call; best effort (pipe-max-size).
      (void)::fcntl(fd.get(), F_SETPIPE_SZ, static_cast<int>(StreamReaders::k_pipe_bytes));
      if (hand_over(local_rank, stream, tag)) {
        return true;
      }
    }
    if (!m_agent->workers_ended() && m_console.backlogged(stream == Stream::k_out ? 1 : 2)) {
      // The console is behind: this worker waits on its pipe, as it would
      // writing to that console itself; the loop goes on.
      m_loop.remove(fd.get());
      m_paused.insert(tag);
      m_agent->on_output_paused(local_rank, true);
    }
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    return false;
  }
  close_stream(local_rank, stream);
  return false;
}

void Driver::close_stream(int local_rank, Stream stream) {
  auto& child = m_spawner->children().at(static_cast<size_t>(local_rank));
  posix::Fd& fd = stream == Stream::k_out ? child.out() : child.err();
  if (!fd) {
    return;
  }
  // Its only fd now (a reader thread closed its copy when the stream ended
  // there): the close takes it out of the loop's epoll.
  m_loop.forget_closed(fd.get());
  m_worker_fds.erase(fd.get());
  fd.close();
  m_agent->on_output_closed(local_rank, stream);
}

bool Driver::hand_over(int local_rank, Stream stream, uint64_t tag) {
  if (m_fault || !m_agent->output_needs_only_router()) {
    return false;
  }
  if (!m_readers) {
    const int threads = StreamReaders::threads_for_this_machine();
    if (threads == 0) {
      return false;
    }
    m_readers = std::make_unique<StreamReaders>(m_agent->router(), m_console, threads);
    m_loop.set(m_readers->ended_fd(), EPOLLIN, k_tag_readers);
  }
  auto& child = m_spawner->children().at(static_cast<size_t>(local_rank));
  const posix::Fd& fd = stream == Stream::k_out ? child.out() : child.err();
  StreamReaders::Slot* slot =
      m_readers->adopt(tag, m_agent->router().stream_ref(local_rank, stream), fd.get());
  if (slot == nullptr) {
    return false;
  }
  m_loop.remove(fd.get());  // kept open: the thread reads its own copy
  m_handed[tag] = slot;
  log::debug("local rank {}'s {} fills its pipe: read on a reader thread from now on", local_rank,
             stream == Stream::k_out ? "stdout" : "stderr");
  return true;
}

// Streams that ended on a reader thread: closed here as the loop closes its own.
void Driver::take_ended_streams() {
  for (StreamReaders::Slot* slot : m_readers->take_ended()) {
    auto it = m_handed.find(slot->tag);
    if (it == m_handed.end() || it->second != slot) {
      continue;  // closed here already, or a past round's
    }
    m_handed.erase(it);
    close_stream(static_cast<int>(slot->tag / 2), static_cast<Stream>(slot->tag % 2));
  }
}

// Reads the paused streams again: those whose console has room, or all.
void Driver::resume_streams(bool all) {
  for (auto it = m_paused.begin(); it != m_paused.end();) {
    const auto stream = static_cast<Stream>(*it % 2);
    if (!all && m_console.backlogged(stream == Stream::k_out ? 1 : 2)) {
      ++it;
      continue;
    }
    auto& child = m_spawner->children().at(static_cast<size_t>(*it / 2));
    posix::Fd& fd = stream == Stream::k_out ? child.out() : child.err();
    if (fd) {
      m_loop.set(fd.get(), EPOLLIN, *it);
    }
    m_agent->on_output_paused(static_cast<int>(*it / 2), false);
    it = m_paused.erase(it);
  }
}

void Driver::reap() {
  while (auto reaped = reap_any()) {
    if (auto dumped = m_spawner->debugger_of(reaped->first)) {
      m_agent->on_stacks_dumped(*dumped);
      continue;
    }
    auto lr = m_spawner->local_rank_of(reaped->first);
    if (!lr) {
      continue;  // a reparented orphan (we are a subreaper)
    }
    m_spawner->children()[static_cast<size_t>(*lr)].mark_reaped();
    // What is already in its pipes comes first, so its last stderr lines
    // are known before the failure is reported.
    for (Stream s : {Stream::k_out, Stream::k_err}) {
      for (int round = 0; round < k_drain_rounds && read_stream(*lr, s); ++round) {
      }
    }
    // Its last progress too (--restart-min-progress judges the round by it).
    for (int round = 0; round < k_drain_rounds && read_progress(*lr); ++round) {
    }
    m_agent->on_worker_exit(*lr, reaped->second);
  }
}

}  // namespace ddplaunch
