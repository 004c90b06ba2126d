#include "agent/launch.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "agent/agent.hpp"
#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "node/resources.hpp"
#include "posix/event_loop.hpp"
#include "posix/net.hpp"
#include "posix/signals.hpp"
#include "proc/reap.hpp"
#include "rendezvous/records.hpp"
#include "rendezvous/store_link.hpp"

namespace ddplaunch {

namespace {

using Stream = OutputRouter::Stream;

// epoll tags: streams are 2 * local rank + stream; the others sit above.
constexpr uint64_t k_tag_signals = 1ULL << 62;
constexpr uint64_t k_tag_link = 1ULL << 61;
constexpr size_t k_read_chunk = 64 * 1024;
constexpr int k_drain_rounds = 64;  // bounded: a grandchild may still be writing

class StdioConsole : public ConsoleSink {
 public:
  bool write(int fd, std::string_view data) override { return posix::write_all(fd, data); }
};

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

void write_summary_json(const std::string& path, const JobSummary& summary) {
  std::ofstream out(path, std::ios::trunc);
  out << encode_summary(summary);
  out.close();
  if (!out) {
    log::error("--summary-json: cannot write {}; check the directory exists and is writable", path);
  }
}

// The event loop around one Agent.
class Driver {
 public:
  Driver(posix::SignalFd& signals, Agent& agent, ProcessSpawner& spawner, StoreLink* link)
      : m_signals(signals), m_agent(agent), m_spawner(spawner), m_link(link) {
    m_loop.set(signals.fd(), EPOLLIN, k_tag_signals);
  }

  void run() {
    while (!m_agent.done()) {
      sync_fds();
      std::optional<Clock::TimePoint> deadline = m_agent.next_deadline();
      if (m_link != nullptr) {
        if (auto t = m_link->deadline(); t && (!deadline || *t < *deadline)) {
          deadline = t;
        }
      }
      for (const auto& ready : m_loop.wait(deadline)) {
        dispatch(ready);
        if (m_agent.done()) {
          return;
        }
      }
      if (m_link != nullptr) {
        m_link->on_time(std::chrono::steady_clock::now());
      }
      m_agent.on_time();
    }
  }

 private:
  void sync_fds() {
    if (m_link != nullptr) {
      auto watches = m_link->watches();
      for (auto it = m_link_fds.begin(); it != m_link_fds.end();) {
        const bool live =
            std::any_of(watches.begin(), watches.end(), [&](const auto& w) { return w.fd == *it; });
        if (!live) {
          m_loop.remove(*it);
          it = m_link_fds.erase(it);
        } else {
          ++it;
        }
      }
      for (const auto& w : watches) {
        m_loop.set(w.fd, w.events, k_tag_link | w.id);
        m_link_fds.insert(w.fd);
      }
    }
    auto& children = m_spawner.children();
    if (children.size() == m_children_watched) {
      return;  // workers start once; their pipes leave the loop as they close
    }
    m_children_watched = children.size();
    for (size_t i = 0; i < children.size(); ++i) {
      for (int s = 0; s < 2; ++s) {
        posix::Fd& fd = s == 0 ? children[i].out() : children[i].err();
        if (fd && !m_loop.contains(fd.get())) {
          m_loop.set(fd.get(), EPOLLIN, 2 * i + static_cast<uint64_t>(s));
        }
      }
    }
  }

  void dispatch(const posix::EventLoop::Ready& ready) {
    if (ready.tag == k_tag_signals) {
      while (auto sig = m_signals.read_one()) {
        if (*sig == SIGCHLD) {
          reap();
        } else {
          m_agent.on_signal(*sig);
        }
      }
    } else if ((ready.tag & k_tag_link) != 0) {
      // Find the fd by its id: the link matches fds itself.
      for (const auto& w : m_link->watches()) {
        if ((k_tag_link | w.id) == ready.tag) {
          m_link->on_ready(w.fd, ready.events, std::chrono::steady_clock::now());
          break;
        }
      }
    } else {
      read_stream(static_cast<int>(ready.tag / 2), static_cast<Stream>(ready.tag % 2));
    }
  }

  // Reads one chunk; false when nothing more is there now.
  bool read_stream(int local_rank, Stream stream) {
    auto& child = m_spawner.children().at(static_cast<size_t>(local_rank));
    posix::Fd& fd = stream == Stream::k_out ? child.out() : child.err();
    if (!fd) {
      return false;
    }
    ssize_t n = ::read(fd.get(), m_buffer.data(), m_buffer.size());
    if (n > 0) {
      m_agent.on_output(local_rank, stream,
                        std::string_view(m_buffer.data(), static_cast<size_t>(n)));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return false;
    }
    m_loop.remove(fd.get());
    fd.close();
    m_agent.on_output_closed(local_rank, stream);
    return false;
  }

  void reap() {
    while (auto reaped = reap_any()) {
      auto lr = m_spawner.local_rank_of(reaped->first);
      if (!lr) {
        continue;  // a reparented orphan (we are a subreaper)
      }
      m_spawner.children()[static_cast<size_t>(*lr)].mark_reaped();
      // What is already in its pipes comes first, so its last stderr lines
      // are known before the failure is reported.
      for (Stream s : {Stream::k_out, Stream::k_err}) {
        for (int round = 0; round < k_drain_rounds && read_stream(*lr, s); ++round) {
        }
      }
      m_agent.on_worker_exit(*lr, reaped->second);
    }
  }

  posix::SignalFd& m_signals;
  Agent& m_agent;
  ProcessSpawner& m_spawner;
  StoreLink* m_link;
  posix::EventLoop m_loop;
  std::set<int> m_link_fds;
  size_t m_children_watched = 0;
  std::array<char, k_read_chunk> m_buffer;
};

int dry_run(const Config& config, const EnvMap& env, const NodeIdentity& self) {
  const int port = config.worker_port.value_or(self.free_port);
  const int node_rank = config.node_rank.value_or(0);
  Topology topology = uniform_topology(config.nnodes, self.nproc, node_rank, self.host, self.addr,
                                       config.master_addr, port);
  auto& mine = topology.nodes[static_cast<size_t>(node_rank)].workers;
  for (size_t i = 0; i < self.worker_ports.size() && i < mine.size(); ++i) {
    mine[i].port = self.worker_ports[i];
  }
  Plan plan = make_plan(
      config, layout_of(topology, node_rank, config.rdzv_id, config.role, config.max_restarts),
      env);
  posix::write_all(1, encode_dry_run(config, plan, topology));
  return k_exit_ok;
}

}  // namespace

int run_launch(const Config& config, const EnvMap& env) {
  // Signals first, before any thread (the store server) exists: from here to
  // exit they arrive only through this signalfd, which the loop always reads.
  posix::SignalFd signals({SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  ::signal(SIGPIPE, SIG_IGN);
  become_subreaper();

  for (const auto& note : config.notes) {
    log::warn("{}", note);
  }
  const std::string& m = config.master_addr;
  if (config.nnodes > 1 && !config.dry_run &&
      (m == "localhost" || m == "::1" || m.starts_with("127."))) {
    log::info(
        "--master-addr {} is a loopback address: every node of this job must run on this "
        "host; for a job across hosts give node 0's host name or address",
        m);
  }
  NodeIdentity self;
  self.nproc = resolve_nproc(config.nproc_mode, config.nproc_per_node, probe_resources(env));
  self.host = local_hostname();
  self.addr = config.local_addr.empty() ? posix::resolve_numeric(self.host) : config.local_addr;
  if (config.nnodes == 1 || config.dry_run) {
    self.free_port = config.worker_port ? 0 : posix::pick_free_port();
  }
  if (config.env_tf) {
    // Free a moment ago; TensorFlow binds them as its workers start.
    for (int i = 0; i < self.nproc; ++i) {
      self.worker_ports.push_back(posix::pick_free_port());
    }
  }
  if (config.dry_run) {
    return dry_run(config, env, self);
  }

  StdioConsole console;
  SystemClock clock;
  ProcessSpawner spawner;
  std::unique_ptr<StoreLink> link;
  if (config.nnodes > 1) {
    link = std::make_unique<StoreLink>(config);
  }
  Agent agent(config, env, self, spawner, clock, link.get(), console);
  if (link) {
    link->set_listener(agent);
  }
  Driver driver(signals, agent, spawner, link.get());
  agent.start();
  driver.run();
  link.reset();  // node 0's store goes away only now

  JobSummary summary = agent.summary();
  summary.launcher_max_rss_kib = peak_rss_kib();
  if (!config.summary_json.empty()) {
    write_summary_json(config.summary_json, summary);
  }
  if (agent.error()) {
    throw LaunchError(summary.exit_code, *agent.error());
  }
  std::string report = format_failure_report(summary);
  if (!report.empty()) {
    posix::write_all(2, report);
  }
  return summary.exit_code;
}

}  // namespace ddplaunch
