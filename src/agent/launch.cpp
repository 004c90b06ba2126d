#include "agent/launch.hpp"

#include <sys/eventfd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>

#include "agent/agent.hpp"
#include "agent/agent_tree.hpp"
#include "agent/driver.hpp"
#include "agent/health_check.hpp"
#include "agent/job_events.hpp"
#include "agent/job_pages.hpp"
#include "agent/launch_report.hpp"
#include "agent/node_store.hpp"
#include "agent/python_stacks.hpp"
#include "agent/reach_probe.hpp"
#include "config/launch_error.hpp"
#include "launcher/agent_channel.hpp"
#include "launcher/plan.hpp"
#include "log.hpp"
#include "mpi/pmix_env_cache.hpp"
#include "mpi/pmix_exchange.hpp"
#include "mpi/pmix_server.hpp"
#include "mpi/topology_cache.hpp"
#include "node/gpu_release.hpp"
#include "node/identity.hpp"
#include "node/resources.hpp"
#include "output/console.hpp"
#include "output/event_log.hpp"
#include "output/report_json.hpp"
#include "output/reports.hpp"
#include "output/status_page.hpp"
#include "posix/fd.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"
#include "posix/signals.hpp"
#include "proc/elf.hpp"
#include "proc/guard.hpp"
#include "proc/reap.hpp"
#include "proc/spawn.hpp"
#include "rendezvous/status_collector.hpp"
#include "rendezvous/store_host.hpp"
#include "rendezvous/store_link.hpp"
#include "store/async_client.hpp"
#include "store/server.hpp"
#include "supervise/signal_policy.hpp"

namespace ddplaunch {

namespace {

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
  LaunchSpec plan = make_launch_spec(
      config, layout_of(topology, node_rank, config.rdzv_id, config.role, config.max_restarts), env,
      self.bindings);
  console.write_own(1, encode_dry_run(config, plan, topology));
  return k_exit_ok;
}

// The store's address and secret, resolved once: the token read from its
// file, node 0's address through mpirun's PMIx server when none was given.
StoreAddress resolve_store_address(const Config& config, const EnvMap& env, Driver& driver) {
  StoreAddress address{config.master_addr, config.master_port, load_token(config, env)};
  if (config.nnodes == 1 || config.dry_run) {
    return address;
  }
  if (config.pick_store_port && config.node_rank == 0) {
    // Node 0 started by a launching command that chose no port: one free
    // here (the launching command tells the other agents).
    address.port = posix::pick_free_port();
  }
  if (config.master_via_pmix || (config.token_via_pmix && address.token.empty())) {
    // With no token of its own, node 0 makes one and hands it to every node
    // through the PMIx server that started them (mpirun's, srun --mpi=pmix's):
    // with nothing typed, the store admits only this job. PMIx rank 0 offers.
    PmixShared shared =
        pmix_exchange(config.node_rank.value_or(-1), dialable_addrs(),
                      address.token.empty() ? random_secret() : "", millis(config.rdzv_timeout_s),
                      [&driver](int fd, Driver::TimePoint deadline) {
                        return driver.wait_readable(fd, deadline, "exchanging through PMIx");
                      });
    if (config.master_via_pmix) {
      address.host = shared.master_addr;
    }
    if (address.token.empty() && !shared.token.empty()) {
      address.token = std::move(shared.token);
      log::debug("the job token came from node 0 through PMIx");
    }
    log::debug("node 0's address, through PMIx: {}", address.host);
  }
  if (!config.master_via_pmix && !config.launcher_channel && posix::is_loopback(address.host)) {
    log::info(
        "--master-addr {} is a loopback address: every node of this job must run on this "
        "host; for a job across hosts give node 0's host name or address",
        address.host);
  }
  return address;
}

// --stdout-tty: auto gives a terminal to a native program linked with an MPI
// library (as mpirun gives every rank one), whose stdio would otherwise hold
// its lines in 4 KiB blocks; Python runs unbuffered (-u) already, and a
// flood through a terminal is slower than through a pipe.
bool wants_stdout_tty(const Config& config, const EnvMap& env) {
  if (config.stdout_tty != StdoutTty::k_auto) {
    return config.stdout_tty == StdoutTty::k_yes;
  }
  const auto argv = worker_argv(config, env);
  if (argv.size() > 1 && argv[1] == "-u") {
    return false;
  }
  const auto path = find_program(argv.front(), env);
  return path && elf_needs(*path, "libmpi");
}

// This node: its workers, their bindings, its address, its ports.
NodeIdentity identify_node(const Config& config, const EnvMap& env,
                           const std::string& master_addr) {
  NodeIdentity self;
  self.job_id = new_job_id();
  const NodeResources resources =
      probe_resources(env, {.intel_gpus = config.nproc_mode == NprocMode::k_xpu,
                            .numa = config.cpu_bind == CpuBind::k_numa});
  self.nproc = resolve_nproc(config.nproc_mode, config.nproc_per_node, resources);
  std::vector<std::string> binding_notes;
  self.bindings = plan_bindings(config, self.nproc, resources, binding_notes);
  self.usable_cpus = usable_cpus(resources, self.bindings);
  self.probe_cma = probe_cma;
  self.stdout_tty = wants_stdout_tty(config, env);
  for (const auto& note : binding_notes) {
    log::warn("{}", note);
  }
  find_own_address(config, master_addr, self);
  if (config.nnodes > 1 && config.local_addr.empty()) {
    self.ifname_towards = interface_towards;
  }
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
  return self;
}

// Before each restart, the last round's GPU memory is waited for where NVML
// is present (one session, opened at the first restart), in the Driver's
// wait: signals still end it.
Agent::GpuReleaseWait gpu_release_wait(const EnvMap& env, Driver& driver) {
  auto holders = std::make_shared<std::optional<GpuHolders>>();
  return [&env, &driver, holders](const std::vector<pid_t>& pids,
                                  std::chrono::milliseconds timeout) -> std::optional<pid_t> {
    if (!*holders) {
      std::string why;
      *holders = nvml_gpu_holders(env, why);
      if (!**holders) {
        log::debug("the last round's GPU memory is not waited for: {}", why);
      }
    }
    if (!**holders) {
      return std::nullopt;
    }
    const posix::Fd never(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    return wait_gpu_release(
        **holders, pids, std::chrono::steady_clock::now() + timeout,
        [&](std::chrono::steady_clock::time_point until) {
          driver.wait_readable(never.get(), until, "waiting for the last round's GPU memory");
        },
        [] { return std::chrono::steady_clock::now(); });
  };
}

// `ddplaunch status`'s GPU memory per rank: NVML, opened on the first
// request (a job nobody asks about never loads it); absent: nothing shown.
StatusRoom::GpuMemory gpu_memory(const EnvMap& env) {
  auto reader = std::make_shared<std::optional<GpuMemory>>();
  return [&env, reader]() -> std::optional<std::unordered_map<pid_t, unsigned long long>> {
    if (!*reader) {
      std::string why;
      *reader = nvml_gpu_memory(env, why);
      if (!**reader) {
        log::debug("status shows no GPU memory: {}", why);
      }
    }
    return **reader ? (**reader)() : std::nullopt;
  };
}

// Process-wide settings made while this process has one thread.
void prepare_process(const Config& config, const EnvMap& env) {
  ::signal(SIGPIPE, SIG_IGN);
  become_subreaper();
  raise_fd_limit_for_launcher();
  reserve_spawn_slots();
  if (config.pmix && env.count("PMIX_MCA_gds") == 0) {
    // The PMIx server keeps its job data in its own memory ("hash"), not in
    // shared-memory files (ds21, ds12): a client of those opens the files in
    // PMIx_Init before it connects, and a worker may start before its
    // server does (mpi/pmix_relay.hpp). Set here, while this process has one
    // thread: libpmix reads it when it starts. The workers' environment was
    // taken already and does not carry it.
    ::setenv("PMIX_MCA_gds", "hash", 0);
  }
}

// A name that resolves only once node 0 runs is waited for; signals still
// end the wait (the Driver reads them).
void wait_for_master(const Config& config, Driver& driver) {
  const posix::Fd never(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  wait_for_master_name(config, [&](std::chrono::steady_clock::time_point until) {
    driver.wait_readable(never.get(), until, "waiting for --master-addr to resolve");
  });
}

// The PMIx server its MPI workers' MPI_Init finds, starting on its own
// thread while this node finds its resources and joins.
std::unique_ptr<PmixServer> start_pmix(const EnvMap& env, const JobGuard& guard) {
  PmixServer::Options options;
  options.tmpdir = guard.job_dir();
  options.cache_topology = topology_cache_enabled(env);
  if (pmix_lazy_enabled(env)) {
    // The environment an earlier launch's server gave its workers: with it,
    // the workers start at once and the server only when one of them
    // connects (a job that never calls MPI_Init never loads libpmix).
    options.env_fingerprint = pmix_env_fingerprint(env);
    options.env_template = read_pmix_env_cache(pmix_env_cache_path(), options.env_fingerprint);
  }
  return PmixServer::start(std::move(options));
}

// --event-log's health_check event: before joining, or before a round.
void health_event(EventLog* events, const HealthCheckResult& result, std::string_view before) {
  if (events != nullptr) {
    events->emit(SystemClock().wall_now(), "health_check",
                 EventFields()
                     .text("before", before)
                     .flag("ok", result.ok)
                     .text("status", result.status)
                     .real("seconds", result.seconds)
                     .text("command", result.command));
  }
}

// The MPI room: the PMIx server's store connection and its links in the
// tree of agents (the node's), its queue of upcalls (read into the round's
// MpiRanks) and its relay, each on the loop.
struct MpiRoom {
  MpiRanks ranks;
  posix::Watch queue;
  std::optional<posix::Watch> relay;
  PmixServer& pmix;
  MpiRoom(PmixServer& server, NodeStore& store, posix::EventLoop& loop)
      : ranks(server),
        queue(loop, server.event_fd(), [this] { ranks.take_events(); }),
        pmix(server) {
    pmix.attach_store(store.client.get(), store.tree.get());
    if (pmix.relay_fd() >= 0) {
      relay.emplace(loop, pmix.relay_fd(), [&server] { server.pump_relay(); });
    }
  }
  // The server outlives the room: it lets go of the store and the tree
  // before they go, however the run ends (an exception too).
  ~MpiRoom() { pmix.attach_store(nullptr); }
  MpiRoom(const MpiRoom&) = delete;
  MpiRoom& operator=(const MpiRoom&) = delete;
};

// The rooms around the Agent, each told of the round by it and reading
// its view: status (with NVML's GPU memory), stacks (its debuggers' time
// on the loop, their ends from the Driver's reaping), the event log.
struct AgentRooms {
  StatusRoom status;
  StacksRoom stacks;
  posix::TimedOwner<StacksRoom> stacks_timer;
  std::optional<JobEvents> events;

  AgentRooms(const Config& config, const EnvMap& env, Agent& agent, const NodeIdentity& self,
             Spawner& spawner, const Clock& clock, Driver& driver, EventLog* log)
      : status(agent, config, self, clock),
        stacks(agent, config, self, spawner, clock),
        stacks_timer(driver.loop(), stacks) {
    status.set_gpu_memory(gpu_memory(env));
    if (log != nullptr) {
      events.emplace(*log, agent, config, self.nproc, clock);
      agent.observe(*events);
    }
    agent.observe(status);
    agent.observe(stacks);
    driver.claim_debuggers([this](pid_t pid) { return stacks.on_debugger_ended(pid); });
  }
};

// What the Agent calls out to: the health check, the GPU release wait, and
// the store link's events; the store's requests to the rooms.
void hook_agent(const Config& config, const EnvMap& env, Agent& agent, Driver& driver,
                NodeStore& store, EventLog* events, AgentRooms& rooms) {
  if (!config.health_check.empty()) {
    // Again before each restart, while the nodes meet: it holds this node's
    // loop (bounded by --health-check-timeout; signals still end it).
    agent.set_health_check([&config, &env, &driver, events]() -> std::optional<std::string> {
      const HealthCheckResult result = run_and_show_health_check(config, env, driver);
      health_event(events, result, "round");
      return result.ok ? std::nullopt : std::optional<std::string>(result.describe());
    });
  }
  agent.set_gpu_release_wait(gpu_release_wait(env, driver));
  if (store.link) {
    store.link->set_listener(agent);
    store.answer_requests(rooms.status, rooms.stacks,
                          [&agent](RoundObserver& o) { agent.observe(o); });
  }
}

// Runs the agent's rounds to the end on the Driver's loop.
void run_rounds(const EnvMap& env, Agent& agent, AgentRooms& rooms, Driver& driver,
                ProcessSpawner& spawner, NodeStore& store,
                const std::unique_ptr<StoreServer>& workers_store,
                const std::string& workers_token) {
  auto fault = env.find("DDPLAUNCH_FAULT");
  try {
    agent.start();
    if (workers_store) {
      // Its thread starts when a worker first connects: a job whose workers
      // never use the store pays one epoll_ctl for it, after the spawn.
      driver.serve_when_connected(workers_store->listen_fd(), [&, workers_token] {
        workers_store->serve();
        store.answer_locally(workers_store->port(), workers_token, rooms.status, rooms.stacks,
                             driver.loop());
      });
    }
    driver.run(agent, spawner, fault != env.end() && fault->second == "output");
  } catch (const std::exception& e) {
    driver.publish_failure(store.link.get(), store.client_on_loop.get(),
                           agent.node_name() + " hit an internal error: " + e.what());
    throw;
  }
}

}  // namespace

namespace {

// What a node's launch holds once this process is set up (run_launch()).
struct LaunchProcess {
  const Config& config;
  const EnvMap& env;
  std::optional<JobGuard>& guard;
  EnvMap& worker_env;
  ConsoleWriter& console;
  Driver& driver;
};

// The job's rounds on this node, once it may join: its side of the store,
// the MPI room, the Agent and what it calls out to, the pages; then the
// report. Returns the exit code.
int run_node(LaunchProcess& p, const StoreAddress& address, NodeIdentity self, PmixServer* pmix,
             EventLog* events, const std::optional<HealthCheckResult>& health,
             const std::unique_ptr<StoreServer>& workers_store) {
  const Config& config = p.config;
  SystemClock clock;
  ProcessSpawner spawner;
  if (p.guard) {
    spawner.spare(p.guard->guard_pid());
    spawner.set_marker(p.guard->marker());
  }
  NodeStore store(config, address, clock, self, p.driver.loop());
  std::optional<MpiRoom> mpi;
  if (pmix != nullptr) {
    mpi.emplace(*pmix, store, p.driver.loop());
  }
  Agent agent(config, p.worker_env, self, spawner, clock, store.link.get(), p.console,
              mpi ? &mpi->ranks : nullptr);
  AgentRooms rooms(config, p.env, agent, self, spawner, clock, p.driver, events);
  hook_agent(config, p.env, agent, p.driver, store, events, rooms);
  if (config.metrics_port != 0 && store.client) {
    store.collector = std::make_unique<StatusCollector>(*store.client, clock,
                                                        [&agent] { return agent.round_nnodes(); });
  }
  const std::unique_ptr<MetricsServer> metrics =
      serve_job_pages(config, agent, rooms.status, p.driver.loop(), store.collector.get(), events);
  const auto token = p.worker_env.find("DDPLAUNCH_STORE_TOKEN");
  run_rounds(p.env, agent, rooms, p.driver, spawner, store, workers_store,
             token != p.worker_env.end() ? token->second : std::string());
  // Every round is over and its workers reaped: the second spawning thread
  // may go, while this one reports.
  retire_spawn_thread();
  if (pmix != nullptr) {
    pmix->attach_store(nullptr);
  }
  store.close();
  return report(config, p.env, agent, p.console, health);
}

// This node before it joins: the store's address, its identity, its PMIx
// server, its events, its health check, its workers' store; then the run
// (or the dry run's plan). Returns the exit code.
int launch_node(LaunchProcess& p) {
  const Config& config = p.config;
  check_summary_path(summary_path(config.summary_json, config.node_rank).value_or(""));
  wait_for_master(config, p.driver);
  const StoreAddress address = resolve_store_address(config, p.env, p.driver);
  // After the PMIx exchange above (a client of mpirun's, done), before the
  // first round.
  std::unique_ptr<PmixServer> pmix = config.pmix && p.guard ? start_pmix(p.env, *p.guard) : nullptr;
  NodeIdentity self = identify_node(config, p.env, address.host);
  if (p.guard) {
    self.job_dir = p.guard->job_dir();
    if (config.python_stacks_signal) {
      arm_python_stacks(*config.python_stacks_signal, self.job_dir, p.worker_env);
    }
  }
  if (config.dry_run) {
    return dry_run(config, p.env, self, p.console);
  }
  // --metrics-port's page draws its timeline from the last events kept.
  std::unique_ptr<EventLog> events =
      config.event_log.empty() && config.metrics_port == 0
          ? nullptr
          : std::make_unique<EventLog>(config.event_log, p.console, self.host);
  if (events && config.metrics_port != 0) {
    events->keep_recent(k_page_events);
  }
  // Before this node joins: a node that fails it says so in its join record
  // (node 0 ends the job, or an elastic one goes on without it).
  std::optional<HealthCheckResult> health;
  if (!config.health_check.empty()) {
    health = check_health(config, p.env, p.driver, self);
    health_event(events.get(), *health, "join");
  }
  const auto workers_store = give_workers_a_store(config, address, p.worker_env);
  return run_node(p, address, std::move(self), pmix.get(), events.get(), health, workers_store);
}

}  // namespace

int run_launch(const Config& config, const EnvMap& env, AgentChannel* channel) {
  // Signals first, before any thread (the store server, PMIx's) exists: from
  // here to exit they arrive only through this signalfd, which the Driver
  // always reads. A SIGHUP ignored at start (nohup) stays ignored: the job
  // survives the terminal's hangup, as the user asked.
  const bool nohup = posix::inherited_ignore(SIGHUP);
  posix::SignalFd signals(handled_signals(nohup));
  prepare_process(config, env);
  // Before any thread (PMIx's, the store's) exists: the guard is a fork.
  std::optional<JobGuard> guard;
  EnvMap worker_env = env;
  if (!config.dry_run) {
    auto mode = env.find("DDPLAUNCH_GUARD");
    guard.emplace(mode == env.end() || mode->second != "process");
    worker_env["DDPLAUNCH_AGENT_ID"] = guard->marker();
  }
  if (channel != nullptr) {
    // After the guard's fork: its bytes become this process's signals.
    watch_agent_channel(*channel);
  }
  // After the guard's fork, and before anything else is printed: from here a
  // console nobody reads delays what is shown, never the loop. Destroyed last.
  ConsoleWriter console;
  Driver driver(signals, console);
  for (const auto& note : config.notes) {
    log::warn("{}", note);
  }
  if (nohup) {
    log::debug("SIGHUP is ignored (nohup): the job survives a hangup; stop it with SIGTERM");
  }
  LaunchProcess process{config, env, guard, worker_env, console, driver};
  const int exit_code = launch_node(process);
  // The exit drain, still watching the signals: a stop signal ends it at
  // once (128+N), instead of waiting out a console nobody reads.
  const std::optional<int> drain_signal = driver.drain();
  return drain_signal ? 128 + *drain_signal : exit_code;
}

}  // namespace ddplaunch
