#include "agent/launch.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <stdexcept>

#include "agent/agent.hpp"
#include "cluster/pmix_exchange.hpp"
#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "node/resources.hpp"
#include "output/console.hpp"
#include "posix/event_loop.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"
#include "posix/signals.hpp"
#include "proc/guard.hpp"
#include "proc/reap.hpp"
#include "proc/spawn.hpp"
#include "rendezvous/records.hpp"
#include "rendezvous/store_host.hpp"
#include "rendezvous/store_link.hpp"
#include "store/async_client.hpp"
#include "store/auth.hpp"
#include "store/server.hpp"
#include "supervise/signal_policy.hpp"

namespace ddplaunch {

namespace {

using Stream = OutputRouter::Stream;

// epoll tags: streams are 2 * local rank + stream; the others sit above.
constexpr uint64_t k_tag_signals = 1ULL << 62;
constexpr uint64_t k_tag_link = 1ULL << 61;
constexpr uint64_t k_tag_console = 1ULL << 60;
constexpr uint64_t k_tag_progress = 1ULL << 59;  // | local rank: its DDPLAUNCH_PROGRESS_FD pipe
constexpr size_t k_read_chunk = 64 * 1024;
constexpr int k_drain_rounds = 64;  // bounded: a grandchild may still be writing

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

// An inherited TORCHELASTIC_ERROR_FILE (a scheduler's, or an outer torchrun's)
// receives the root cause's error, as torchrun's own @record writes it; with
// no error file from that rank, what ddplaunch knows of its end.
void write_inherited_error_file(const EnvMap& env, const JobSummary& summary) {
  auto it = env.find("TORCHELASTIC_ERROR_FILE");
  if (it == env.end() || it->second.empty() || summary.exit_code == 0 || !summary.root_cause) {
    return;
  }
  const RankOutcome& r = *summary.root_cause;
  WorkerError error;
  if (r.error) {
    error = *r.error;
  } else {
    error.message = "ddplaunch: " + describe_outcome(r);
    for (const auto& line : r.last_stderr) {
      error.traceback += line + "\n";
    }
    error.timestamp = std::to_string(static_cast<long long>(r.end_time));
  }
  std::ofstream out(it->second, std::ios::trunc);
  out << encode_error_file(error, summary.exit_code);
  out.close();
  if (!out) {
    log::warn("cannot write the root cause's error to TORCHELASTIC_ERROR_FILE={}", it->second);
  }
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
  // `fault`: DDPLAUNCH_FAULT=output, for tests: the loop fails with an
  // internal error at a worker's first output, as a node that breaks mid-run.
  Driver(posix::SignalFd& signals, Agent& agent, ProcessSpawner& spawner, StoreLink* link,
         AsyncClient* store, ConsoleWriter& console, bool fault)
      : m_signals(signals),
        m_agent(agent),
        m_spawner(spawner),
        m_link(link),
        m_store(store),
        m_console(console),
        m_fault(fault) {
    m_loop.set(signals.fd(), EPOLLIN, k_tag_signals);
    m_loop.set(console.wake_fd(), EPOLLIN, k_tag_console);
  }

  void run() {
    while (!m_agent.done()) {
      sync_fds();
      if (m_agent.workers_ended()) {
        resume_streams(true);  // what is left in the pipes is bounded: read it now
      }
      std::optional<Clock::TimePoint> deadline = m_agent.next_deadline();
      auto consider = [&deadline](std::optional<Clock::TimePoint> t) {
        if (t && (!deadline || *t < *deadline)) {
          deadline = t;
        }
      };
      if (m_link != nullptr) {
        consider(m_link->deadline());
        consider(m_store->deadline());
      }
      for (const auto& ready : m_loop.wait(deadline)) {
        dispatch(ready);
        if (m_agent.done()) {
          return;
        }
      }
      if (m_link != nullptr) {
        const auto now = std::chrono::steady_clock::now();
        m_store->on_time(now);
        m_link->on_time(now);
      }
      m_agent.on_time();
    }
  }

 private:
  void sync_fds() {
    sync_worker_fds();  // first: a new round's pipes may take numbers the link then re-adds
    if (m_store != nullptr) {
      // One socket; a new one for each connect attempt (the number may be reused).
      const int fd = m_store->events() != 0 ? m_store->fd() : -1;
      if (m_store_fd >= 0 && m_store_fd != fd) {
        m_loop.remove(m_store_fd);
      }
      m_store_fd = fd;
      if (fd >= 0) {
        m_loop.set(fd, m_store->events(), k_tag_link);
      }
    }
  }

  void sync_worker_fds() {
    if (m_spawner.generation() == m_generation_watched) {
      return;  // workers start once a round; their pipes leave the loop as they close
    }
    // A new round's workers: the last round's pipes are closed, and their
    // numbers may be the new ones'.
    m_generation_watched = m_spawner.generation();
    for (int fd : m_worker_fds) {
      m_loop.remove(fd);
    }
    m_worker_fds.clear();
    m_paused.clear();
    auto& children = m_spawner.children();
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

  void dispatch(const posix::EventLoop::Ready& ready) {
    if (ready.tag == k_tag_signals) {
      while (auto sig = m_signals.read_one()) {
        if (*sig == SIGCHLD) {
          reap();
        } else {
          m_agent.on_signal(*sig);
        }
      }
    } else if (ready.tag == k_tag_console) {
      m_console.read_wake();
      resume_streams(false);
    } else if ((ready.tag & k_tag_progress) != 0) {
      read_progress(static_cast<int>(ready.tag & ~k_tag_progress));
    } else if (ready.tag == k_tag_link) {
      m_store->on_ready(ready.events, std::chrono::steady_clock::now());
    } else {
      read_stream(static_cast<int>(ready.tag / 2), static_cast<Stream>(ready.tag % 2));
    }
  }

  // What a worker wrote to its progress pipe only says it is alive.
  void read_progress(int local_rank) {
    posix::Fd& fd = m_spawner.children().at(static_cast<size_t>(local_rank)).progress();
    if (!fd) {
      return;
    }
    ssize_t n = ::read(fd.get(), m_buffer.data(), m_buffer.size());
    if (n > 0) {
      m_agent.on_progress(local_rank);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      m_loop.remove(fd.get());
      m_worker_fds.erase(fd.get());
      fd.close();
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
      if (m_fault) {
        throw std::runtime_error("the fault DDPLAUNCH_FAULT=output asked for");
      }
      const uint64_t tag = 2 * static_cast<uint64_t>(local_rank) + static_cast<uint64_t>(stream);
      if (!m_agent.workers_ended() && m_console.backlogged(stream == Stream::k_out ? 1 : 2)) {
        // The console is behind: this worker waits on its pipe, as it would
        // writing to that console itself; the loop goes on.
        m_loop.remove(fd.get());
        m_paused.insert(tag);
      }
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return false;
    }
    m_loop.remove(fd.get());
    m_worker_fds.erase(fd.get());
    fd.close();
    m_agent.on_output_closed(local_rank, stream);
    return false;
  }

  // Reads the paused streams again: those whose console has room, or all.
  void resume_streams(bool all) {
    for (auto it = m_paused.begin(); it != m_paused.end();) {
      const auto stream = static_cast<Stream>(*it % 2);
      if (!all && m_console.backlogged(stream == Stream::k_out ? 1 : 2)) {
        ++it;
        continue;
      }
      auto& child = m_spawner.children().at(static_cast<size_t>(*it / 2));
      posix::Fd& fd = stream == Stream::k_out ? child.out() : child.err();
      if (fd) {
        m_loop.set(fd.get(), EPOLLIN, *it);
      }
      it = m_paused.erase(it);
    }
  }

  void reap() {
    while (auto reaped = reap_any()) {
      if (auto dumped = m_spawner.debugger_of(reaped->first)) {
        m_agent.on_stacks_dumped(*dumped);
        continue;
      }
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
  AsyncClient* m_store;  // the link's connection
  posix::EventLoop m_loop;
  ConsoleWriter& m_console;
  int m_store_fd = -1;          // the store's socket as the loop holds it
  std::set<uint64_t> m_paused;  // stream tags not read while the console is behind
  uint64_t m_generation_watched = 0;
  std::set<int> m_worker_fds;  // the pipes of this round's workers in the loop
  bool m_fault;
  std::array<char, k_read_chunk> m_buffer;
};

int dry_run(const Config& config, const EnvMap& env, const NodeIdentity& self,
            ConsoleWriter& console) {
  const int port = config.worker_port.value_or(self.free_port);
  const int node_rank = config.node_rank.value_or(0);
  Topology topology = uniform_topology(config.nnodes, self.nproc, node_rank, self.host, self.addr,
                                       config.master_addr, port);
  auto& mine = topology.nodes[static_cast<size_t>(node_rank)].workers;
  for (size_t i = 0; i < self.worker_ports.size() && i < mine.size(); ++i) {
    mine[i].port = self.worker_ports[i];
  }
  Plan plan = make_plan(
      config, layout_of(topology, node_rank, config.rdzv_id, config.role, config.max_restarts), env,
      self.bindings);
  console.write_own(1, encode_dry_run(config, plan, topology));
  return k_exit_ok;
}

// Refuses, before anything starts, a --summary-json path that cannot be
// written (the summary would otherwise be lost at the very end).
void check_summary_path(const std::string& path) {
  if (path.empty()) {
    return;
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  const bool created = fd >= 0;
  if (!created && errno == EEXIST) {
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  }
  if (fd < 0) {
    throw UsageError("--summary-json " + path + ": cannot write it (" + std::strerror(errno) +
                     "); check the directory exists and is writable");
  }
  ::close(fd);
  if (created) {
    ::unlink(path.c_str());
  }
}

// Refuses a --master-addr this node cannot resolve at all (a typo), rather
// than retrying it until --rdzv-timeout; a passing DNS failure is retried.
void check_master_resolves(const Config& config) {
  if (config.nnodes == 1 || config.dry_run) {
    return;
  }
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(config.master_addr.c_str(), nullptr, &hints, &res);
  if (res != nullptr) {
    freeaddrinfo(res);
  }
  if (rc == EAI_NONAME || rc == EAI_NODATA || rc == EAI_FAIL) {
    throw UsageError("cannot resolve --master-addr " + config.master_addr + " (" +
                     gai_strerror(rc) +
                     "); give node 0's host name or address as this node can "
                     "resolve it");
  }
}

// The job's secret: --rdzv-token-file, else DDPLAUNCH_RDZV_TOKEN; trailing
// whitespace (a file's newline) is not part of it. Empty: none.
std::string load_token(const Config& config, const EnvMap& env) {
  std::string token;
  if (!config.rdzv_token_file.empty()) {
    std::ifstream in(config.rdzv_token_file, std::ios::binary);
    if (!in) {
      throw UsageError("--rdzv-token-file " + config.rdzv_token_file + ": cannot read it (" +
                       std::strerror(errno) + "); give a readable file holding the job's secret");
    }
    token.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    struct stat st = {};
    if (::stat(config.rdzv_token_file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      log::warn("--rdzv-token-file {} can be read by other users: chmod 600 it",
                config.rdzv_token_file);
    }
  } else if (auto it = env.find("DDPLAUNCH_RDZV_TOKEN"); it != env.end()) {
    token = it->second;
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
    token.pop_back();
  }
  if (token.empty() && (!config.rdzv_token_file.empty() || env.contains("DDPLAUNCH_RDZV_TOKEN"))) {
    throw UsageError(
        "the job token is empty: put a secret in --rdzv-token-file or DDPLAUNCH_RDZV_TOKEN "
        "(for example: head -c 32 /dev/urandom | base64 > token; chmod 600 token)");
  }
  return token;
}

// This host's addresses other hosts may dial: every non-loopback one, else loopback.
std::vector<std::string> dialable_addrs() {
  std::vector<std::string> out;
  for (const auto& i : posix::interfaces()) {
    if (!i.loopback && !i.addr.starts_with("fe80:")) {
      out.push_back(i.addr);
    }
  }
  if (out.empty()) {
    out.push_back("127.0.0.1");
  }
  return out;
}

// The address other hosts most likely reach this one at: the one holding the
// default route, else the first non-loopback one.
std::optional<std::string> outward_addr() {
  auto candidates = dialable_addrs();
  if (candidates.size() == 1 && posix::is_loopback(candidates.front())) {
    return std::nullopt;
  }
  if (candidates.size() > 1) {
    // Any address outside this host's networks takes the default route
    // (nothing is sent); none when there is no default route.
    if (auto via = posix::route_source("192.0.2.255"); via && !posix::is_loopback(*via)) {
      return via;
    }
  }
  return candidates.front();
}

// The address this node advertises (--local-addr, else the one its packets to
// the master leave from, else its host name's) and the interface holding it.
void find_own_address(const Config& config, NodeIdentity& self) {
  self.host = local_hostname();
  if (!config.local_addr.empty()) {
    self.addr = config.local_addr;
  } else if (config.nnodes > 1 && !config.dry_run) {
    self.addr = posix::route_source(config.master_addr).value_or(posix::resolve_numeric(self.host));
    if (posix::is_loopback(self.addr) && !posix::is_loopback(config.master_addr)) {
      // The master's name is this host's and maps to loopback here (Debian's
      // 127.0.1.1 self entry): advertise what other hosts reach instead.
      self.addr = outward_addr().value_or(self.addr);
    }
  } else {
    self.addr = posix::resolve_numeric(self.host);
  }
  if (config.nnodes == 1) {
    return;  // one node: gloo and NCCL find each other on this host
  }
  if (auto iface = posix::interface_holding(self.addr, posix::interfaces())) {
    self.ifname = iface->name;
  }
  if (posix::is_loopback(self.addr) && !posix::is_loopback(config.master_addr) && !config.dry_run) {
    log::warn(
        "this node advertises the loopback address {} in a job across hosts: other nodes "
        "cannot reach its workers; give --local-addr with an address they can dial",
        self.addr);
  }
}

// An error that ends this node's run mid-job: every other node hears it at
// once through the store rather than after the heartbeat timeout, and node 0
// does not wait for this node's results. Bounded, and best effort: the error
// itself is what this node reports.
void publish_failure(StoreLink& link, AsyncClient& store, const std::string& message) {
  try {
    link.publish_stop(JobVerdict{k_exit_internal, message, std::nullopt, -1});
    link.abandon();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (auto now = std::chrono::steady_clock::now();
         !(link.stop_confirmed() && link.abandoned()) && now < until && !store.failed();
         now = std::chrono::steady_clock::now()) {
      pollfd p{store.fd(), static_cast<short>(store.events()), 0};
      ::poll(&p, p.fd >= 0 ? 1 : 0, 20);
      now = std::chrono::steady_clock::now();
      if (p.revents != 0) {
        store.on_ready(static_cast<uint32_t>(p.revents), now);
      }
      store.on_time(now);
      link.on_time(now);
    }
  } catch (const std::exception& e) {
    log::debug("could not tell the other nodes: {}", e.what());
  }
}

// Where every worker finds the job's store (`ddplaunch store`,
// StoreClient::from_environment(), docs/ENVIRONMENT.md): node 0's in a
// multi-node job, with the workers' credential if the job has a token; a one-node job's own on
// loopback, with a fresh secret. Workers' keys live under the prefix.
std::unique_ptr<StoreServer> give_workers_a_store(const Config& config, EnvMap& worker_env) {
  std::unique_ptr<StoreServer> own;
  // Never the job's token itself: a credential derived from it, which node
  // 0's store admits as well.
  std::string token = config.rdzv_token.empty() ? "" : auth::worker_token(config.rdzv_token);
  if (config.nnodes == 1) {
    StoreOptions options;
    // From the kernel directly: OpenSSL's generator would cost the launcher
    // ~2 MiB of memory at start for a secret nobody outside this host needs.
    std::array<unsigned char, 32> secret{};
    if (::getrandom(secret.data(), secret.size(), 0) != static_cast<ssize_t>(secret.size())) {
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    static constexpr char k_hex[] = "0123456789abcdef";
    for (const unsigned char c : secret) {
      options.token += k_hex[c >> 4];
      options.token += k_hex[c & 15];
    }
    token = options.token;
    own = std::make_unique<StoreServer>("127.0.0.1", 0, std::move(options));
    worker_env["DDPLAUNCH_STORE_ADDR"] = "127.0.0.1";
    worker_env["DDPLAUNCH_STORE_PORT"] = std::to_string(own->port());
  } else {
    worker_env["DDPLAUNCH_STORE_ADDR"] = config.master_addr;
    worker_env["DDPLAUNCH_STORE_PORT"] = std::to_string(config.master_port);
  }
  if (token.empty()) {
    worker_env.erase("DDPLAUNCH_STORE_TOKEN");
  } else {
    worker_env["DDPLAUNCH_STORE_TOKEN"] = token;
  }
  worker_env["DDPLAUNCH_STORE_PREFIX"] = "user/";
  // The launcher's own path, so that `"$DDPLAUNCH_EXE" store ...` works in a
  // worker when ddplaunch was started by path and is not on PATH.
  std::array<char, 4096> exe{};
  const ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (n > 0) {
    worker_env["DDPLAUNCH_EXE"] = std::string(exe.data(), static_cast<size_t>(n));
  }
  return own;
}

}  // namespace

int run_launch(const Config& given, const EnvMap& env) {
  // Signals first, before any thread (the store server, PMIx's) exists: from
  // here to exit they arrive only through this signalfd, which the loop always
  // reads. A SIGHUP ignored at start (nohup) stays ignored: the job survives
  // the terminal's hangup, as the user asked.
  const bool nohup = posix::inherited_ignore(SIGHUP);
  posix::SignalFd signals(handled_signals(nohup));
  ::signal(SIGPIPE, SIG_IGN);
  become_subreaper();
  raise_fd_limit_for_launcher();
  // Before any thread (PMIx's, the store's) exists: the guard is a fork.
  std::optional<JobGuard> guard;
  EnvMap worker_env = env;
  if (!given.dry_run) {
    auto mode = env.find("DDPLAUNCH_GUARD");
    guard.emplace(mode == env.end() || mode->second != "process");
    worker_env["DDPLAUNCH_AGENT_ID"] = guard->marker();
  }
  // After the guard's fork, and before anything else is printed: from here a
  // console nobody reads delays what is shown, never the loop. Destroyed last.
  ConsoleWriter console;

  for (const auto& note : given.notes) {
    log::warn("{}", note);
  }
  if (nohup) {
    log::debug("SIGHUP is ignored (nohup): the job survives a hangup; stop it with SIGTERM");
  }
  Config config = given;
  check_summary_path(config.summary_json);
  check_master_resolves(config);
  config.rdzv_token = load_token(config, env);
  if (config.nnodes > 1 && config.rdzv_token.empty() && !config.dry_run &&
      !posix::is_loopback(config.master_addr)) {
    log::info(
        "the store admits any client that can reach {}:{}; to admit only this job's nodes, give "
        "every node the same secret with --rdzv-token-file FILE or DDPLAUNCH_RDZV_TOKEN",
        config.master_addr, config.master_port);
  }
  if (config.master_via_pmix && config.nnodes > 1 && !config.dry_run) {
    config.master_addr = pmix_exchange_master_addr(config.node_rank.value_or(-1), dialable_addrs(),
                                                   millis(config.rdzv_timeout_s), signals);
    log::debug("node 0's address, through PMIx: {}", config.master_addr);
  }
  const std::string& m = config.master_addr;
  if (config.nnodes > 1 && !config.dry_run && !config.master_via_pmix && posix::is_loopback(m)) {
    log::info(
        "--master-addr {} is a loopback address: every node of this job must run on this "
        "host; for a job across hosts give node 0's host name or address",
        m);
  }
  NodeIdentity self;
  const NodeResources resources = probe_resources(env);
  self.nproc = resolve_nproc(config.nproc_mode, config.nproc_per_node, resources);
  std::vector<std::string> binding_notes;
  self.bindings = plan_bindings(config, self.nproc, resources, binding_notes);
  for (const auto& note : binding_notes) {
    log::warn("{}", note);
  }
  find_own_address(config, self);
  if (config.nnodes == 1 || config.dry_run) {
    self.free_port = config.worker_port ? 0 : posix::pick_free_port();
    self.pick_port = [] { return posix::pick_free_port(); };
  }
  if (config.env_tf) {
    // Free a moment ago; TensorFlow binds them as its workers start.
    for (int i = 0; i < self.nproc; ++i) {
      self.worker_ports.push_back(posix::pick_free_port());
    }
  }
  if (config.dry_run) {
    return dry_run(config, env, self, console);
  }
  const auto workers_store = give_workers_a_store(config, worker_env);

  SystemClock clock;
  ProcessSpawner spawner;
  if (guard) {
    spawner.spare(guard->guard_pid());
  }
  // Node 0 hosts the store; every agent holds one connection to it.
  std::unique_ptr<StoreServer> store_server;
  std::unique_ptr<AsyncClient> store;
  std::unique_ptr<StoreLink> link;
  if (config.nnodes > 1) {
    store_server = host_store(config);
    store = std::make_unique<AsyncClient>(
        config.master_addr, config.master_port, millis(config.rdzv_timeout_s),
        millis(config.heartbeat_timeout_s), clock.now(), config.rdzv_token);
    link = make_store_link(config, *store, clock, store_server != nullptr);
  }
  Agent agent(config, worker_env, self, spawner, clock, link.get(), console);
  if (link) {
    link->set_listener(agent);
  }
  auto fault = env.find("DDPLAUNCH_FAULT");
  Driver driver(signals, agent, spawner, link.get(), store.get(), console,
                fault != env.end() && fault->second == "output");
  try {
    agent.start();
    driver.run();
  } catch (const std::exception& e) {
    if (link) {
      publish_failure(*link, *store, agent.node_name() + " hit an internal error: " + e.what());
    }
    throw;
  }
  // The connection first, so that node 0's store sees it close, not a reset;
  // node 0's store goes away only now.
  link.reset();
  store.reset();
  store_server.reset();

  JobSummary summary = agent.summary();
  summary.launcher_max_rss_kib = peak_rss_kib();
  if (!config.summary_json.empty()) {
    write_summary_json(config.summary_json, summary);
  }
  write_inherited_error_file(env, summary);
  if (agent.error()) {
    throw LaunchError(summary.exit_code, *agent.error());
  }
  std::string report = format_failure_report(summary);
  if (!report.empty()) {
    console.write_own(2, report);
  }
  // The exit drain, still under the signalfd: a stop signal ends it at once
  // (128+N), instead of waiting out a console nobody reads.
  std::optional<int> drain_signal;
  console.finish([&signals, &drain_signal] {
    while (auto sig = signals.read_one()) {
      if (is_stop_signal(*sig)) {
        drain_signal = sig;
        return true;
      }
    }
    return false;
  });
  return drain_signal ? 128 + *drain_signal : summary.exit_code;
}

}  // namespace ddplaunch
