#include "ddplaunch/cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "ddplaunch/error.hpp"

namespace ddplaunch {

namespace {

// torchrun reads these environment variables as defaults for its options (it
// names them PET_<DEST>); Kubeflow's PyTorchJob, for one, sets PET_NNODES,
// PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT.
// A flag on the command line wins over its variable.
struct PetEnv {
  const char* flag;
  const char* env;
};
constexpr PetEnv k_pet_env[] = {
    {"--nproc-per-node", "PET_NPROC_PER_NODE"},
    {"--max-restarts", "PET_MAX_RESTARTS"},
    {"--nnodes", "PET_NNODES"},
    {"--node-rank", "PET_NODE_RANK"},
    {"--master-addr", "PET_MASTER_ADDR"},
    {"--master-port", "PET_MASTER_PORT"},
    {"--rdzv-endpoint", "PET_RDZV_ENDPOINT"},
    {"--rdzv-id", "PET_RDZV_ID"},
    {"--rdzv-backend", "PET_RDZV_BACKEND"},
    {"--rdzv-conf", "PET_RDZV_CONF"},
    {"--monitor-interval", "PET_MONITOR_INTERVAL"},
    {"--start-method", "PET_START_METHOD"},
    {"--log-dir", "PET_LOG_DIR"},
    {"--redirects", "PET_REDIRECTS"},
    {"--tee", "PET_TEE"},
    {"--role", "PET_ROLE"},
    {"--standalone", "PET_STANDALONE"},
};

// Appends which variable a bad value came from, when the message is about a
// flag that was not given on the command line but set through PET_*.
std::string name_the_variable(std::string message, const std::vector<std::string>& args) {
  // The launcher's own arguments: what follows "--" belongs to the program.
  const auto own_end = std::find(args.begin(), args.end(), "--");
  std::string from;
  for (const auto& p : k_pet_env) {
    const std::string flag = p.flag;
    std::string underscored = flag;
    std::replace(underscored.begin() + 2, underscored.end(), '-', '_');
    const bool on_command_line = std::any_of(args.begin(), own_end, [&](const std::string& a) {
      return a.starts_with(flag) || a.starts_with(underscored);
    });
    if (!on_command_line && std::getenv(p.env) != nullptr &&
        message.find(flag) != std::string::npos) {
      from += (from.empty() ? "$" : ", $") + std::string(p.env);
    }
  }
  return from.empty() ? message : message + " (set by " + from + "; fix or unset it)";
}

constexpr int k_max_nproc = 4096;
constexpr int k_max_nodes = 65536;

std::optional<long long> to_int(std::string_view s) {
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) {
    return std::nullopt;
  }
  return v;
}

int parse_int_in(std::string_view value, std::string_view flag, long long lo, long long hi,
                 std::string_view what) {
  auto v = to_int(value);
  if (!v || *v < lo || *v > hi) {
    throw UsageError(std::string(flag) + " must be " + std::string(what) + ", got '" +
                     std::string(value) + "'");
  }
  return static_cast<int>(*v);
}

void parse_nproc(const std::string& value, Config& c) {
  if (value == "auto") {
    c.nproc_mode = NprocMode::k_auto;
  } else if (value == "cpu") {
    c.nproc_mode = NprocMode::k_cpu;
  } else if (value == "gpu") {
    c.nproc_mode = NprocMode::k_gpu;
  } else {
    c.nproc_mode = NprocMode::k_fixed;
    c.nproc_per_node = parse_int_in(value, "--nproc-per-node", 1, k_max_nproc,
                                    "a number from 1 to 4096, or auto, cpu or gpu");
  }
}

void parse_nnodes(const std::string& value, Config& c) {
  const std::string_view what = "a number from 1 to 65536 (or MIN:MAX with MIN equal to MAX)";
  auto colon = value.find(':');
  if (colon == std::string::npos) {
    c.nnodes = parse_int_in(value, "--nnodes", 1, k_max_nodes, what);
    return;
  }
  int lo = parse_int_in(value.substr(0, colon), "--nnodes", 1, k_max_nodes, what);
  int hi = parse_int_in(value.substr(colon + 1), "--nnodes", 1, k_max_nodes, what);
  if (lo != hi) {
    throw UsageError("--nnodes " + value +
                     ": elastic node ranges are not supported; give one number of nodes");
  }
  c.nnodes = lo;
}

void check_seconds(double value, std::string_view flag, bool allow_zero) {
  if (!std::isfinite(value) || value < 0 || (!allow_zero && value == 0)) {
    throw UsageError(std::string(flag) + " must be a " +
                     (allow_zero ? "non-negative" : "positive") + " number of seconds");
  }
}

}  // namespace

StreamSelection parse_stream_selection(std::string_view value, std::string_view flag) {
  const std::string what = std::string(flag) +
                           " must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both), "
                           "or LOCAL_RANK:VALUE pairs like 0:1,1:2; got '" +
                           std::string(value) + "'";
  StreamSelection sel;
  if (value.find(':') == std::string_view::npos) {
    auto v = to_int(value);
    if (!v || *v < 0 || *v > 3) {
      throw UsageError(what);
    }
    sel.all = static_cast<int>(*v);
    return sel;
  }
  while (!value.empty()) {
    auto comma = value.find(',');
    auto pair = value.substr(0, comma);
    auto colon = pair.find(':');
    if (colon == std::string_view::npos) {
      throw UsageError(what);
    }
    auto rank = to_int(pair.substr(0, colon));
    auto v = to_int(pair.substr(colon + 1));
    if (!rank || *rank < 0 || *rank > k_max_nproc || !v || *v < 0 || *v > 3) {
      throw UsageError(what);
    }
    sel.per_local_rank[static_cast<int>(*rank)] = static_cast<int>(*v);
    if (comma == std::string_view::npos) {
      break;
    }
    value.remove_prefix(comma + 1);
  }
  return sel;
}

std::set<int> parse_rank_list(std::string_view value, std::string_view flag) {
  std::set<int> ranks;
  const std::string what = std::string(flag) +
                           " must be a comma-separated list of ranks like 0,3; got '" +
                           std::string(value) + "'";
  if (value.empty()) {
    throw UsageError(what);
  }
  while (true) {
    auto comma = value.find(',');
    auto v = to_int(value.substr(0, comma));
    if (!v || *v < 0 || *v > 1'000'000'000) {
      throw UsageError(what);
    }
    ranks.insert(static_cast<int>(*v));
    if (comma == std::string_view::npos) {
      break;
    }
    value.remove_prefix(comma + 1);
  }
  return ranks;
}

void validate_prefix_template(std::string_view tmpl) {
  size_t pos = 0;
  while ((pos = tmpl.find('{', pos)) != std::string_view::npos) {
    auto close = tmpl.find('}', pos);
    if (close == std::string_view::npos) {
      throw UsageError("--prefix: unclosed '{' in '" + std::string(tmpl) +
                       "'; fields are {rank} {local_rank} {node_rank} {host} {time}");
    }
    auto name = tmpl.substr(pos + 1, close - pos - 1);
    if (name != "rank" && name != "local_rank" && name != "node_rank" && name != "host" &&
        name != "time") {
      throw UsageError("--prefix: unknown field {" + std::string(name) +
                       "}; fields are {rank} {local_rank} {node_rank} {host} {time}");
    }
    pos = close + 1;
  }
}

namespace {

CliResult parse_arguments(const std::vector<std::string>& args) {
  CliResult result;
  Config& c = result.config;

  CLI::App app{
      "ddplaunch: launch and supervise distributed training workers "
      "(torchrun-compatible flags)\nUsage: ddplaunch [options] [--] program [args...]",
      "ddplaunch"};
  app.footer(
      "Exit status: 0 when every rank succeeds; else the first failing rank's exit code\n"
      "(128+N if it died of signal N). 2 bad usage, 3 rendezvous failed, 4 node or store\n"
      "lost, 127 program cannot be executed, 1 internal error. See README.md.");
  app.prefix_command();
  app.set_version_flag("--version", std::string("ddplaunch ") + DDPLAUNCH_VERSION);

  std::string nproc = "1", nnodes = "1", node_rank = "auto", rdzv_endpoint, rdzv_backend;
  std::string redirects, tee, ranks_filter, local_ranks_filter;
  std::optional<int> worker_port;
  bool standalone = false, no_prefix = false;
  std::string unused_str;

  const char* g_work = "Workers";
  app.add_option("--nproc-per-node,--nproc_per_node", nproc,
                 "Workers on this node: N, auto (GPUs if any, else CPUs), cpu or gpu [1]")
      ->group(g_work);
  app.add_flag("-m,--module", c.module, "Run the program as a Python module: python -m program")
      ->group(g_work);
  app.add_flag("--no-python,--no_python", c.no_python,
               "Run the program as given, even if it ends in .py")
      ->group(g_work);
  app.add_option("--python", c.python, "Python for .py programs [$PYTHON_EXEC, else python3]")
      ->group(g_work);
  app.add_option("--role", c.role, "ROLE_NAME given to the workers [default]")->group(g_work);
  app.add_option("--max-restarts,--max_restarts", c.max_restarts,
                 "Passed to workers as TORCHELASTIC_MAX_RESTARTS; workers are not restarted [0]")
      ->check(CLI::Range(0, 1000000))
      ->group(g_work);

  const char* g_nodes = "Nodes and rendezvous";
  app.add_option("--nnodes", nnodes, "Number of nodes in the job [1]")->group(g_nodes);
  app.add_option("--node-rank,--node_rank", node_rank,
                 "This node's rank, or auto (the store host is 0, others by arrival) [auto]")
      ->group(g_nodes);
  app.add_option("--master-addr,--master_addr", c.master_addr,
                 "Address of node 0, where the store runs [127.0.0.1]")
      ->group(g_nodes);
  app.add_option("--master-port,--master_port", c.master_port, "Port of the store [29500]")
      ->check(CLI::Range(1, 65535))
      ->group(g_nodes);
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint,
                 "HOST:PORT, the same as --master-addr HOST --master-port PORT")
      ->group(g_nodes);
  app.add_option("--rdzv-id,--rdzv_id", c.rdzv_id, "Job id every node must agree on [none]")
      ->group(g_nodes);
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend,
                 "Accepted for torchrun scripts: static or c10d (both use ddplaunch's store)")
      ->group(g_nodes);
  app.add_option("--rdzv-conf,--rdzv_conf", unused_str, "Accepted for torchrun scripts; ignored")
      ->group(g_nodes);
  app.add_option("--rdzv-timeout,--rdzv_timeout", c.rdzv_timeout_s,
                 "Seconds to wait for every node to join [600]")
      ->group(g_nodes);
  app.add_option("--worker-port,--worker_port", worker_port,
                 "MASTER_PORT for the workers [a free port on the master host]")
      ->check(CLI::Range(1, 65535))
      ->group(g_nodes);
  app.add_option("--local-addr,--local_addr", c.local_addr,
                 "Address this node advertises [its host name's address]")
      ->group(g_nodes);
  app.add_option("--heartbeat-interval", c.heartbeat_interval_s,
                 "Seconds between liveness reports to the store [1]")
      ->group(g_nodes);
  app.add_option("--heartbeat-timeout", c.heartbeat_timeout_s,
                 "Seconds of silence after which a node is declared lost [15]")
      ->group(g_nodes);
  app.add_flag("--standalone", standalone, "One node; the same as --nnodes 1")->group(g_nodes);

  const char* g_sup = "Supervision";
  app.add_option("--term-timeout,--term_timeout", c.term_timeout_s,
                 "Seconds between SIGTERM and SIGKILL when stopping workers [30]")
      ->group(g_sup);
  app.add_option("--summary-json,--summary_json", c.summary_json,
                 "Write every rank's outcome to this file as JSON")
      ->group(g_sup);
  app.add_option("--monitor-interval,--monitor_interval", unused_str,
                 "Accepted for torchrun scripts; ignored (ddplaunch is event-driven)")
      ->group(g_sup);
  app.add_option("--start-method,--start_method", unused_str,
                 "Accepted for torchrun scripts; ignored")
      ->group(g_sup);

  const char* g_out = "Output";
  app.add_option("--prefix", c.prefix,
                 "Line prefix; fields {rank} {local_rank} {node_rank} {host} {time} "
                 "['[rank {rank}]: ']")
      ->group(g_out);
  app.add_flag("--no-prefix", no_prefix, "Print workers' lines without a prefix")->group(g_out);
  app.add_option("--log-dir,--log_dir", c.log_dir,
                 "Also write each rank's stdout and stderr to DIR/RANK/{stdout,stderr}.log")
      ->group(g_out);
  app.add_option("-r,--redirects", redirects,
                 "Send these streams to the log files only: 0 none, 1 out, 2 err, 3 both, "
                 "or 0:1,1:2")
      ->group(g_out);
  app.add_option("-t,--tee", tee, "Send these streams to the log files and the console")
      ->group(g_out);
  app.add_option("--ranks-filter,--ranks_filter", ranks_filter,
                 "Only these global ranks reach the console, e.g. 0,3 (files get all)")
      ->group(g_out);
  app.add_option("--local-ranks-filter,--local_ranks_filter", local_ranks_filter,
                 "Only these local ranks reach the console")
      ->group(g_out);

  const char* g_launch = "Launcher";
  app.add_flag("--dry-run", c.dry_run,
               "Print the configuration and every local rank's environment as JSON; "
               "launch nothing")
      ->group(g_launch);
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error or off [info]")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->group(g_launch);

  for (const auto& p : k_pet_env) {
    app.get_option(p.flag)->envname(p.env);
  }

  std::vector<std::string> argv_rev(args.rbegin(), args.rend());
  try {
    app.parse(argv_rev);
  } catch (const CLI::CallForHelp&) {
    result.print_and_exit = app.help();
    return result;
  } catch (const CLI::CallForAllHelp&) {
    result.print_and_exit = app.help("", CLI::AppFormatMode::All);
    return result;
  } catch (const CLI::CallForVersion&) {
    result.print_and_exit = std::string("ddplaunch ") + DDPLAUNCH_VERSION + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    throw UsageError(msg);
  }

  parse_nproc(nproc, c);
  parse_nnodes(nnodes, c);
  if (standalone) {
    if (c.nnodes != 1) {
      throw UsageError("--standalone runs one node; drop --nnodes or --standalone");
    }
  }
  if (node_rank != "auto") {
    c.node_rank = parse_int_in(node_rank, "--node-rank", 0, k_max_nodes - 1,
                               "a number from 0 to nnodes-1, or auto");
    if (*c.node_rank >= c.nnodes) {
      throw UsageError("--node-rank " + node_rank + " is out of range for --nnodes " +
                       std::to_string(c.nnodes) + "; node ranks go from 0 to " +
                       std::to_string(c.nnodes - 1));
    }
  }
  if (!rdzv_endpoint.empty()) {
    auto colon = rdzv_endpoint.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw UsageError("--rdzv-endpoint must be HOST:PORT, got '" + rdzv_endpoint + "'");
    }
    c.master_addr = rdzv_endpoint.substr(0, colon);
    c.master_port = parse_int_in(rdzv_endpoint.substr(colon + 1), "--rdzv-endpoint port", 1, 65535,
                                 "a port from 1 to 65535");
  }
  if (!rdzv_backend.empty() && rdzv_backend != "static" && rdzv_backend != "c10d") {
    throw UsageError("--rdzv-backend must be static or c10d (ddplaunch uses its own store), got '" +
                     rdzv_backend + "'");
  }
  if (c.master_addr.empty()) {
    throw UsageError("--master-addr must not be empty; give node 0's host name or address");
  }
  if (c.rdzv_id.empty()) {
    throw UsageError("--rdzv-id must not be empty; give the job a name every node agrees on");
  }
  c.worker_port = worker_port;
  check_seconds(c.term_timeout_s, "--term-timeout", true);
  check_seconds(c.rdzv_timeout_s, "--rdzv-timeout", false);
  check_seconds(c.heartbeat_interval_s, "--heartbeat-interval", false);
  check_seconds(c.heartbeat_timeout_s, "--heartbeat-timeout", false);
  if (c.heartbeat_timeout_s <= c.heartbeat_interval_s) {
    throw UsageError("--heartbeat-timeout must be longer than --heartbeat-interval");
  }
  if (!redirects.empty()) {
    c.redirects = parse_stream_selection(redirects, "--redirects");
  }
  if (!tee.empty()) {
    c.tee = parse_stream_selection(tee, "--tee");
  }
  if (!ranks_filter.empty()) {
    c.ranks_filter = parse_rank_list(ranks_filter, "--ranks-filter");
  }
  if (!local_ranks_filter.empty()) {
    c.local_ranks_filter = parse_rank_list(local_ranks_filter, "--local-ranks-filter");
  }
  if (no_prefix) {
    c.prefix.clear();
  }
  validate_prefix_template(c.prefix);
  if (c.module && c.no_python) {
    throw UsageError("-m/--module runs a Python module and cannot be combined with --no-python");
  }

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    throw UsageError("unknown option '" + rest.front() +
                     "'; see 'ddplaunch --help' (put the program after '--' if it starts "
                     "with '-')");
  }
  if (rest.empty()) {
    throw UsageError("no program given; usage: ddplaunch [options] [--] program [args...]");
  }
  c.program = rest.front();
  c.program_args.assign(rest.begin() + 1, rest.end());
  return result;
}

}  // namespace

CliResult parse_command_line(const std::vector<std::string>& args) {
  try {
    return parse_arguments(args);
  } catch (const UsageError& e) {
    throw UsageError(name_the_variable(e.what(), args));
  }
}

}  // namespace ddplaunch
