#include "launcher/launch_hosts.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>

#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "launcher/forward.hpp"
#include "launcher/hosts_launcher.hpp"
#include "launcher/plan.hpp"
#include "log.hpp"
#include "output/console.hpp"
#include "posix/event_loop.hpp"
#include "posix/fd.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"
#include "posix/signals.hpp"
#include "rendezvous/store_host.hpp"

namespace ddplaunch {

namespace {

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

// Where the job's nodes are and how node 0 is reached: this command's own
// host list, or (--subtree) the part of the job its parent gave it. Node
// 0's store port, when this command picked it for a node 0 here, is held in
// STORE_PORT until the job ends, so that no other launcher on this host
// picks it while node 0's agent starts (its store binds beside the holder).
PlanContext plan_context(const Config& config, const AgentChannel* upstream,
                         posix::Fd& store_port) {
  PlanContext context;
  context.self_path = self_path();
  context.cwd = current_dir();
  if (config.subtree >= 0) {
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
    return context;
  }
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
  context.master_port = config.master_port;
  if (config.source_of("master_port") != "flag") {
    // Node 0 here: a port free now, and held; elsewhere, its agent picks one
    // free there and says it, and the other agents are told (so that two
    // jobs on the same hosts never share one).
    if (context.is_local.front()) {
      posix::HeldPort held = posix::hold_free_port();
      context.master_port = held.port;
      store_port = std::move(held.holder);
    } else if (config.source_of("master_port") == "default") {
      context.node0_picks_store_port = true;
    }
  }
  return context;
}

// What every agent is told first: the parent's header, or the job's token
// and the environment it forwards.
ChannelHeader channel_header(const Config& config, const EnvMap& env,
                             const AgentChannel* upstream) {
  if (upstream != nullptr) {
    return upstream->header;
  }
  ChannelHeader header;
  const bool users_token = !config.rdzv_token_file.empty() || env.contains("DDPLAUNCH_RDZV_TOKEN");
  header.token = users_token ? load_token(config, env) : random_secret();
  header.env = forwarded_environment(env, config.env_export, config.env_forward);
  return header;
}

}  // namespace

int run_hosts_launch(const Config& config, const CommandLine& command_line, const EnvMap& env,
                     AgentChannel* upstream) {
  posix::SignalFd signals(handled_signals(posix::inherited_ignore(SIGHUP)));
  ::signal(SIGPIPE, SIG_IGN);
  posix::Fd store_port;
  const PlanContext context = plan_context(config, upstream, store_port);
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
  ChannelHeader header = channel_header(config, env, upstream);
  if (config.subtree < 0) {
    log::debug("starting {} nodes from here; node 0 is {}:{}", plan.nnodes, plan.master_addr,
               context.master_port);
  }
  // Spares only in an elastic job (plan.cpp's rule): the hosts after MAX.
  const int max_nodes = config.elastic() ? config.nnodes : std::numeric_limits<int>::max();
  posix::EventLoop loop;
  ProcessStarter starter;
  SystemClock clock;
  HostsLauncher::Options options;
  options.elastic = config.elastic();
  options.max_nodes = max_nodes;
  options.via = config.launcher == Launcher::k_local ? "local" : "ssh";
  HostsLauncher launcher(loop, starter, clock, console, upstream, options);
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
    // A simulation's (bench/): milliseconds, 0 to 10,000; anything else is none.
    connect_cost = std::chrono::milliseconds(parse_integer_in(it->second, 0, 10'000).value_or(0));
  }
  launcher.start_all(plan, encode_channel_header(header), connect_cost);
  run_hosts_launcher(launcher, loop, signals, console);
  if (const std::string report = launcher.closing_report(); !report.empty()) {
    console.write_own(2, report);
  }
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
