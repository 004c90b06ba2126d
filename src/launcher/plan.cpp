#include "launcher/plan.hpp"

#include <algorithm>
#include <set>

#include "config/integer.hpp"
#include "config/launch_error.hpp"

namespace ddplaunch {

namespace {

// Options the launching command uses itself: never passed to an agent as
// given (the plan passes what each agent needs instead).
const std::set<std::string_view> k_launcher_keys = {
    "hosts",      "hostfile",        "launcher",    "env_export",       "env_forward",
    "ssh_args",   "ssh_port",        "remote_cwd",  "remote_ddplaunch", "fanout",
    "nnodes",     "node_rank",       "master_addr", "master_port",      "rdzv_endpoint",
    "standalone", "rdzv_token_file", "subtree",     "launcher_channel", "dry_run",
    "wdir",  // as remote_cwd
};
// Of those, the ones a subtree's root needs again to start its own part.
const std::set<std::string_view> k_subtree_keys = {
    "launcher", "ssh_args", "ssh_port", "remote_cwd", "remote_ddplaunch", "fanout",
};

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = text.find_first_not_of(" \t\n", i);
    if (start == std::string_view::npos) {
      break;
    }
    const size_t end = std::min(text.find_first_of(" \t\n", start), text.size());
    out.emplace_back(text.substr(start, end - start));
    i = end;
  }
  return out;
}

void add_flag(std::vector<std::string>& argv, const OptionSpec& spec, const Setting& setting) {
  if (spec.is_flag) {
    if (setting.value == "true") {
      argv.push_back(long_name(spec));
    } else {
      argv.push_back(long_name(spec) + "=" + setting.value);
    }
    return;
  }
  if (spec.repeatable) {
    size_t start = 0;
    while (start <= setting.value.size()) {
      size_t end = setting.value.find('\n', start);
      end = end == std::string::npos ? setting.value.size() : end;
      argv.push_back(long_name(spec) + "=" + setting.value.substr(start, end - start));
      start = end + 1;
    }
    return;
  }
  argv.push_back(long_name(spec) + "=" + setting.value);
}

std::string host_list(const std::vector<HostSlots>& hosts, size_t first, size_t last) {
  std::string out;
  for (size_t i = first; i < last; ++i) {
    out += (out.empty() ? "" : ",") + hosts[i].host;
    if (hosts[i].slots) {
      out += ":" + std::to_string(*hosts[i].slots);
    }
  }
  return out;
}

}  // namespace

std::string shell_quote(std::string_view word) {
  if (!word.empty() && word.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                              "0123456789_-./=:,+@%") == std::string_view::npos) {
    return std::string(word);
  }
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string describe_start(const AgentStart& s) {
  const std::string where = s.local ? "here" : "over ssh";
  if (s.hosts > 1) {
    return "nodes " + std::to_string(s.node_rank) + "-" +
           std::to_string(s.node_rank + s.hosts - 1) + " (through " + s.host + ")";
  }
  return "node " + std::to_string(s.node_rank) + " (" + s.host + ", " + where + ")";
}

std::vector<HostSlots> order_hosts(const Config& config, std::vector<HostSlots> hosts) {
  if (config.source_of("node_rank") == "flag") {
    throw UsageError(
        "--node-rank cannot be given with --hosts/--hostfile: each host's place in the list is "
        "its node rank");
  }
  if (config.source_of("nnodes") == "flag") {
    check_host_count(config, static_cast<int>(hosts.size()));
  }
  if (config.source_of("master_addr") == "flag") {
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const HostSlots& h) { return h.host == config.master_addr; });
    if (it != hosts.end()) {
      std::rotate(hosts.begin(), it, it + 1);
    }
  }
  return hosts;
}

namespace {

// Builds each agent's command line from the user's options and the plan's
// context; plan_hosts() decides which agents are started and how.
class AgentArgs {
 public:
  AgentArgs(const Config& config, const CommandLine& command_line, const PlanContext& context,
            const HostsPlan& plan)
      : m_config(config), m_context(context) {
    gather_flags(command_line);
    m_common.push_back(
        "--nnodes=" + (config.source_of("nnodes") == "flag" && config.elastic()
                           ? std::to_string(config.nnodes_min) + ":" + std::to_string(config.nnodes)
                           : std::to_string(plan.nnodes)));
    m_common.push_back("--master-addr=" + plan.master_addr);
    m_common.push_back("--master-port=" + std::to_string(context.master_port));
    m_common.push_back("--launcher-channel");
    m_program.push_back("--");
    m_program.push_back(config.program);
    m_program.insert(m_program.end(), config.program_args.begin(), config.program_args.end());
  }

  // One agent's own arguments (host i of the context's list).
  std::vector<std::string> agent(size_t i) const {
    const auto& hosts = m_context.hosts;
    const int node_rank = m_context.first_node_rank + static_cast<int>(i);
    std::vector<std::string> args = m_common;
    if (node_rank == 0 && !m_summary_json.empty()) {
      args.push_back("--summary-json=" + m_summary_json);
    }
    if (!m_config.elastic() || node_rank < m_config.nnodes) {
      args.push_back("--node-rank=" + std::to_string(node_rank));
    }  // else a host beyond MAX: a hot spare, ranked when it takes a node's place
    if (node_rank == 0 && m_context.node0_picks_store_port && !m_context.is_local[i]) {
      args.push_back("--pick-store-port");
    }
    if (hosts[i].slots && m_config.source_of("nproc_per_node") != "flag") {
      args.push_back("--nproc-per-node=" + std::to_string(*hosts[i].slots));
    }
    if (m_metrics_port > 0) {
      args.push_back("--metrics-port=" + std::to_string(metrics_port(i)));
    }
    args.insert(args.end(), m_program.begin(), m_program.end());
    return args;
  }

  // --metrics-port for agent i: the port given, plus one for each agent
  // before it in the list on the same host (--launcher local: this one), so
  // that agents sharing a host each listen on a port of their own.
  int metrics_port(size_t i) const {
    const auto& hosts = m_context.hosts;
    int before = 0;
    for (size_t j = 0; j < i; ++j) {
      const bool same = (m_context.is_local[i] && m_context.is_local[j]) ||
                        m_config.launcher == Launcher::k_local || hosts[j].host == hosts[i].host;
      before += same ? 1 : 0;
    }
    return m_metrics_port + before;
  }

  // A subtree root's arguments: it starts hosts [first, last) itself.
  std::vector<std::string> subtree(size_t first, size_t last) const {
    const int node_rank = m_context.first_node_rank + static_cast<int>(first);
    std::vector<std::string> args = m_common;
    if (node_rank == 0 && !m_summary_json.empty()) {
      args.push_back("--summary-json=" + m_summary_json);
    }
    args.insert(args.end(), m_subtree_only.begin(), m_subtree_only.end());
    if (m_metrics_port > 0) {
      args.push_back("--metrics-port=" + std::to_string(metrics_port(first)));
    }
    args.push_back("--hosts=" + host_list(m_context.hosts, first, last));
    args.push_back("--subtree=" + std::to_string(node_rank));
    args.insert(args.end(), m_program.begin(), m_program.end());
    return args;
  }

  // The command that starts ARGS on HOST: ssh running them in the remote
  // directory, or (--launcher local) this binary here.
  std::vector<std::string> remote(const std::string& host, std::vector<std::string> args) const {
    if (m_config.launcher == Launcher::k_local) {
      args.insert(args.begin(), m_context.self_path);
      return args;
    }
    std::vector<std::string> argv{"ssh"};
    for (auto& w : split_words(m_config.ssh_args)) {
      argv.push_back(std::move(w));  // first: ssh keeps the first value of an option
    }
    const int connect_timeout = static_cast<int>(std::clamp(m_config.rdzv_timeout_s, 1.0, 60.0));
    const std::string options[] = {"BatchMode=yes",
                                   "ConnectTimeout=" + std::to_string(connect_timeout),
                                   "ServerAliveInterval=5", "ServerAliveCountMax=3"};
    for (const auto& option : options) {
      argv.push_back("-o");
      argv.push_back(option);
    }
    argv.push_back("-T");
    if (m_config.ssh_port != 0) {
      argv.push_back("-p");
      argv.push_back(std::to_string(m_config.ssh_port));
    }
    argv.push_back(host);
    argv.push_back(remote_command(args));
    return argv;
  }

 private:
  // The user's options less the launcher's own; the subtree roots' extra.
  void gather_flags(const CommandLine& command_line) {
    bool prefix_given = false;
    for (const auto& spec : option_table()) {
      auto it = command_line.flags.find(spec.key);
      if (it == command_line.flags.end()) {
        continue;
      }
      const std::string_view key = spec.key;
      prefix_given = prefix_given || key == "prefix" || key == "no_prefix";
      if (key == "summary_json") {
        // Node 0's summary holds every rank: one writer, even on a shared
        // file system.
        m_summary_json = it->second.value;
        continue;
      }
      if (key == "metrics_port") {
        m_metrics_port = static_cast<int>(parse_integer(it->second.value).value_or(0));
        continue;  // each agent's own (metrics_port())
      }
      if (k_subtree_keys.contains(key)) {
        add_flag(m_subtree_only, spec, it->second);
      } else if (!k_launcher_keys.contains(key)) {
        add_flag(m_common, spec, it->second);
      }
    }
    if (!prefix_given) {
      m_common.push_back("--prefix=" + std::string(k_hosts_prefix));
    }
  }

  // What the remote login shell runs (POSIX sh syntax).
  std::string remote_command(const std::vector<std::string>& args) const {
    std::string quoted;
    for (const auto& a : args) {
      quoted += " " + shell_quote(a);
    }
    const std::string dir = m_config.remote_cwd.empty() ? m_context.cwd : m_config.remote_cwd;
    std::string command = "cd " + shell_quote(dir) + " && ";
    if (!m_config.remote_ddplaunch.empty()) {
      return command + "exec " + shell_quote(m_config.remote_ddplaunch) + quoted;
    }
    return command + "d=" + shell_quote(m_context.self_path) +
           "; [ -x \"$d\" ] || d=ddplaunch; exec \"$d\"" + quoted;
  }

  const Config& m_config;
  const PlanContext& m_context;
  std::vector<std::string> m_common;
  std::vector<std::string> m_subtree_only;
  std::vector<std::string> m_program;
  std::string m_summary_json;
  int m_metrics_port = 0;  // --metrics-port as given (0: none)
};

AgentStart direct_start(const Config& config, const PlanContext& context, const AgentArgs& args,
                        size_t i) {
  AgentStart s;
  s.node_rank = context.first_node_rank + static_cast<int>(i);
  s.host = context.hosts[i].host;
  s.local = config.launcher == Launcher::k_local;
  s.connection = true;
  s.argv = args.remote(s.host, args.agent(i));
  return s;
}

}  // namespace

HostsPlan plan_hosts(const Config& config, const CommandLine& command_line,
                     const PlanContext& context) {
  const auto& hosts = context.hosts;
  HostsPlan plan;
  plan.nnodes = context.nnodes > 0 ? context.nnodes : static_cast<int>(hosts.size());
  plan.master_host = context.first_node_rank == 0 ? hosts.front().host : "";
  plan.master_addr = !context.master_addr.empty() ? context.master_addr : plan.master_host;
  const AgentArgs args(config, command_line, context, plan);

  // Local agents first, then the remote ones, directly up to --fanout, in
  // contiguous groups above it.
  std::vector<size_t> remote;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (context.is_local[i]) {
      AgentStart s;
      s.node_rank = context.first_node_rank + static_cast<int>(i);
      s.host = hosts[i].host;
      s.local = true;
      s.argv = args.agent(i);
      s.argv.insert(s.argv.begin(), context.self_path);
      plan.starts.push_back(std::move(s));
    } else {
      remote.push_back(i);
    }
  }
  const size_t fanout = static_cast<size_t>(config.fanout);
  if (remote.size() <= fanout) {
    for (const size_t i : remote) {
      plan.starts.push_back(direct_start(config, context, args, i));
    }
    return plan;
  }
  // --fanout groups of remote hosts, each contiguous in node order: its
  // first host's ddplaunch starts the rest (given as --hosts with --subtree).
  const size_t groups = fanout;
  size_t begin = 0;
  for (size_t g = 0; g < groups && begin < remote.size(); ++g) {
    const size_t size = (remote.size() - begin + (groups - g) - 1) / (groups - g);
    const size_t end = begin + size;
    const size_t first = remote[begin];
    const size_t last = remote[end - 1] + 1;
    if (size == 1 || last - first != size) {
      // A group that this host splits (listed in its middle): each of its
      // hosts directly.
      for (size_t k = begin; k < end; ++k) {
        plan.starts.push_back(direct_start(config, context, args, remote[k]));
      }
    } else {
      AgentStart s;
      s.node_rank = context.first_node_rank + static_cast<int>(first);
      s.host = hosts[first].host;
      s.hosts = static_cast<int>(size);
      s.local = config.launcher == Launcher::k_local;
      s.connection = true;
      s.argv = args.remote(s.host, args.subtree(first, last));
      plan.starts.push_back(std::move(s));
    }
    begin = end;
  }
  return plan;
}

}  // namespace ddplaunch
