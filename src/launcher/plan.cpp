#include "launcher/plan.hpp"

#include <algorithm>
#include <set>

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

HostsPlan plan_hosts(const Config& config, const CommandLine& command_line,
                     const PlanContext& context) {
  const auto& hosts = context.hosts;
  HostsPlan plan;
  plan.nnodes = context.nnodes > 0 ? context.nnodes : static_cast<int>(hosts.size());
  plan.master_host = context.first_node_rank == 0 ? hosts.front().host : "";
  plan.master_addr = !context.master_addr.empty() ? context.master_addr : plan.master_host;
  const bool local_launcher = config.launcher == Launcher::k_local;

  // What every agent is given: the user's options less the launcher's own.
  std::vector<std::string> common;
  std::vector<std::string> subtree_only;
  bool prefix_given = false;
  std::string summary_json;
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
      summary_json = it->second.value;
      continue;
    }
    if (k_subtree_keys.contains(key)) {
      add_flag(subtree_only, spec, it->second);
    } else if (!k_launcher_keys.contains(key)) {
      add_flag(common, spec, it->second);
    }
  }
  if (!prefix_given) {
    common.push_back("--prefix=" + std::string(k_hosts_prefix));
  }
  common.push_back("--nnodes=" +
                   (config.source_of("nnodes") == "flag" && config.elastic()
                        ? std::to_string(config.nnodes_min) + ":" + std::to_string(config.nnodes)
                        : std::to_string(plan.nnodes)));
  common.push_back("--master-addr=" + plan.master_addr);
  common.push_back("--master-port=" + std::to_string(context.master_port));
  common.push_back("--launcher-channel");

  std::vector<std::string> program{"--"};
  program.push_back(config.program);
  program.insert(program.end(), config.program_args.begin(), config.program_args.end());

  const std::string remote_dir = config.remote_cwd.empty() ? context.cwd : config.remote_cwd;
  auto ssh_argv = [&](const std::string& host, std::vector<std::string> args) {
    if (local_launcher) {
      // --launcher local: the same command, started here without ssh.
      args.insert(args.begin(), context.self_path);
      return args;
    }
    std::vector<std::string> argv{"ssh"};
    for (auto& w : split_words(config.ssh_args)) {
      argv.push_back(std::move(w));  // first: ssh keeps the first value of an option
    }
    const int connect_timeout = static_cast<int>(std::clamp(config.rdzv_timeout_s, 1.0, 60.0));
    const std::string options[] = {"BatchMode=yes",
                                   "ConnectTimeout=" + std::to_string(connect_timeout),
                                   "ServerAliveInterval=5", "ServerAliveCountMax=3"};
    for (const auto& option : options) {
      argv.push_back("-o");
      argv.push_back(option);
    }
    argv.push_back("-T");
    if (config.ssh_port != 0) {
      argv.push_back("-p");
      argv.push_back(std::to_string(config.ssh_port));
    }
    argv.push_back(host);
    // What the remote login shell runs (POSIX sh syntax).
    std::string quoted;
    for (const auto& a : args) {
      quoted += " " + shell_quote(a);
    }
    std::string command = "cd " + shell_quote(remote_dir) + " && ";
    if (!config.remote_ddplaunch.empty()) {
      command += "exec " + shell_quote(config.remote_ddplaunch) + quoted;
    } else {
      command += "d=" + shell_quote(context.self_path) +
                 "; [ -x \"$d\" ] || d=ddplaunch; exec \"$d\"" + quoted;
    }
    argv.push_back(std::move(command));
    return argv;
  };

  auto agent_args = [&](size_t i) {
    std::vector<std::string> args = common;
    if (context.first_node_rank + static_cast<int>(i) == 0 && !summary_json.empty()) {
      args.push_back("--summary-json=" + summary_json);
    }
    const int node_rank = context.first_node_rank + static_cast<int>(i);
    if (!config.elastic() || node_rank < config.nnodes) {
      args.push_back("--node-rank=" + std::to_string(node_rank));
    }  // else a host beyond MAX: a hot spare, ranked when it takes a node's place
    if (context.first_node_rank + static_cast<int>(i) == 0 && context.node0_picks_store_port &&
        !context.is_local[i]) {
      args.push_back("--pick-store-port");
    }
    if (hosts[i].slots && config.source_of("nproc_per_node") != "flag") {
      args.push_back("--nproc-per-node=" + std::to_string(*hosts[i].slots));
    }
    args.insert(args.end(), program.begin(), program.end());
    return args;
  };
  auto subtree_args = [&](size_t first, size_t last) {
    std::vector<std::string> args = common;
    if (context.first_node_rank + static_cast<int>(first) == 0 && !summary_json.empty()) {
      args.push_back("--summary-json=" + summary_json);
    }
    args.insert(args.end(), subtree_only.begin(), subtree_only.end());
    args.push_back("--hosts=" + host_list(hosts, first, last));
    args.push_back("--subtree=" +
                   std::to_string(context.first_node_rank + static_cast<int>(first)));
    args.insert(args.end(), program.begin(), program.end());
    return args;
  };

  // Local agents first, then the remote ones, directly up to --fanout, in
  // contiguous groups above it.
  std::vector<size_t> remote;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (context.is_local[i]) {
      AgentStart s;
      s.node_rank = context.first_node_rank + static_cast<int>(i);
      s.host = hosts[i].host;
      s.local = true;
      s.argv = agent_args(i);
      s.argv.insert(s.argv.begin(), context.self_path);
      plan.starts.push_back(std::move(s));
    } else {
      remote.push_back(i);
    }
  }
  const size_t fanout = static_cast<size_t>(config.fanout);
  if (remote.size() <= fanout) {
    for (const size_t i : remote) {
      AgentStart s;
      s.node_rank = context.first_node_rank + static_cast<int>(i);
      s.host = hosts[i].host;
      s.local = local_launcher;
      s.connection = true;
      s.argv = ssh_argv(hosts[i].host, agent_args(i));
      plan.starts.push_back(std::move(s));
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
    const bool contiguous = last - first == size;
    AgentStart s;
    s.node_rank = context.first_node_rank + static_cast<int>(first);
    s.host = hosts[first].host;
    if (size == 1 || !contiguous) {
      // A group that this host splits (listed in its middle): each of its
      // hosts directly.
      for (size_t k = begin; k < end; ++k) {
        AgentStart one;
        one.node_rank = context.first_node_rank + static_cast<int>(remote[k]);
        one.host = hosts[remote[k]].host;
        one.local = local_launcher;
        one.connection = true;
        one.argv = ssh_argv(one.host, agent_args(remote[k]));
        plan.starts.push_back(std::move(one));
      }
    } else {
      s.hosts = static_cast<int>(size);
      s.local = local_launcher;
      s.connection = true;
      s.argv = ssh_argv(s.host, subtree_args(first, last));
      plan.starts.push_back(std::move(s));
    }
    begin = end;
  }
  return plan;
}

}  // namespace ddplaunch
