#include "config/options.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>

#include "config/integer.hpp"
#include "config/launch_error.hpp"

namespace ddplaunch {

namespace {

constexpr int k_max_nproc = 4096;
constexpr int k_max_nodes = 65536;

int parse_int_in(std::string_view value, std::string_view flag, long long lo, long long hi,
                 std::string_view what) {
  auto v = parse_integer_in(value, lo, hi);
  if (!v) {
    throw UsageError(std::string(flag) + " must be " + std::string(what) + ", got '" +
                     std::string(value) + "'");
  }
  return static_cast<int>(*v);
}

double parse_seconds(const std::string& value, const std::string& flag, bool allow_zero) {
  const auto v = parse_seconds_in(value, 0, k_max_seconds);
  if (!v || (!allow_zero && *v == 0)) {
    throw UsageError(flag + " must be a " + (allow_zero ? "non-negative" : "positive") +
                     " number of seconds up to 315360000 (ten years), got '" + value + "'");
  }
  return *v;
}

bool parse_bool(const std::string& value, const std::string& flag) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "yes" || v == "on" || v.empty()) {
    return true;
  }
  if (v == "false" || v == "0" || v == "no" || v == "off") {
    return false;
  }
  throw UsageError(flag + " takes no value; as a variable it must be true or false, got '" + value +
                   "'");
}

std::string show_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

std::string show_bool(bool b) {
  return b ? "true" : "false";
}

std::string show_selection(const StreamSelection& s) {
  if (s.per_local_rank.empty()) {
    return std::to_string(s.all);
  }
  std::string out;
  for (const auto& [rank, v] : s.per_local_rank) {
    out += (out.empty() ? "" : ",") + std::to_string(rank) + ":" + std::to_string(v);
  }
  return out;
}

std::string show_ranks(const std::optional<std::set<int>>& ranks) {
  if (!ranks) {
    return "all";
  }
  std::string out;
  for (int r : *ranks) {
    out += (out.empty() ? "" : ",") + std::to_string(r);
  }
  return out;
}

void apply_nproc(Config& c, const std::string& value, const std::string& flag) {
  if (value == "auto") {
    c.nproc_mode = NprocMode::k_auto;
  } else if (value == "cpu") {
    c.nproc_mode = NprocMode::k_cpu;
  } else if (value == "gpu") {
    c.nproc_mode = NprocMode::k_gpu;
  } else if (value == "xpu") {
    c.nproc_mode = NprocMode::k_xpu;
  } else {
    c.nproc_mode = NprocMode::k_fixed;
    c.nproc_per_node = parse_int_in(value, flag, 1, k_max_nproc,
                                    "a number from 1 to 4096, or auto, cpu, gpu or xpu");
  }
}

std::string show_nproc(const Config& c) {
  return c.nproc_mode == NprocMode::k_fixed ? std::to_string(c.nproc_per_node)
                                            : nproc_mode_name(c.nproc_mode);
}

void apply_nnodes(Config& c, const std::string& value, const std::string& flag) {
  const std::string_view what = "a number from 1 to 65536, or MIN:MAX";
  auto colon = value.find(':');
  if (colon == std::string::npos) {
    c.nnodes = parse_int_in(value, flag, 1, k_max_nodes, what);
    c.nnodes_min = 0;
    return;
  }
  int lo = parse_int_in(value.substr(0, colon), flag, 1, k_max_nodes, what);
  int hi = parse_int_in(value.substr(colon + 1), flag, 1, k_max_nodes, what);
  if (lo > hi) {
    throw UsageError(flag + " " + value + ": MIN is larger than MAX; give MIN:MAX with MIN <= MAX");
  }
  c.nnodes = hi;
  c.nnodes_min = lo;
}

// --rdzv-conf key=value,...: torchrun's last_call_timeout is read; the rest
// (c10d's read_timeout, is_host, ...) has no meaning here and is ignored.
void apply_rdzv_conf(Config& c, const std::string& value, const std::string& flag) {
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) {
      end = value.size();
    }
    const std::string item = value.substr(start, end - start);
    const auto eq = item.find('=');
    if (eq != std::string::npos && item.substr(0, eq) == "last_call_timeout") {
      c.rdzv_last_call_s = parse_seconds(item.substr(eq + 1), flag + " last_call_timeout", true);
    }
    start = end + 1;
  }
}

void apply_node_rank(Config& c, const std::string& value, const std::string& flag) {
  if (value == "auto") {
    c.node_rank.reset();
    return;
  }
  c.node_rank =
      parse_int_in(value, flag, 0, k_max_nodes - 1, "a number from 0 to nnodes-1, or auto");
}

// torchrun's forms: HOST, HOST:PORT, [IPV6], [IPV6]:PORT; PORT defaults to
// 29400 (torchrun's c10d default) and 0 means any free port (one node only).
void apply_endpoint(Config& c, const std::string& value, const std::string& flag) {
  const std::string what = flag + " must be HOST, HOST:PORT or [IPV6]:PORT, got '" + value + "'";
  std::string host = value;
  std::string port;
  if (value.starts_with("[")) {
    const auto close = value.find(']');
    if (close == std::string::npos || close == 1 ||
        (close + 1 < value.size() && value[close + 1] != ':')) {
      throw UsageError(what);
    }
    host = value.substr(1, close - 1);
    port = close + 1 < value.size() ? value.substr(close + 2) : "";
  } else if (const auto colon = value.find(':'); colon != std::string::npos) {
    if (value.find(':', colon + 1) != std::string::npos) {
      throw UsageError(what + " (put an IPv6 address in brackets)");
    }
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
  }
  if (host.empty()) {
    throw UsageError(what);
  }
  c.master_addr = host;
  c.master_port = port.empty() ? 29400
                               : parse_int_in(port, flag + " port", 0, 65535,
                                              "a port from 1 to 65535, or 0 for any free port");
}

void apply_backend(Config& c, const std::string& value, const std::string& flag) {
  if (value != "static" && value != "c10d") {
    throw UsageError(flag + " must be static or c10d (ddplaunch uses its own store), got '" +
                     value + "'");
  }
  c.rdzv_backend = value;
}

void apply_log_level(Config& c, const std::string& value, const std::string& flag) {
  static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error", "off"};
  if (!levels.contains(value)) {
    throw UsageError(flag + " must be trace, debug, info, warn, error or off, got '" + value + "'");
  }
  c.log_level = value;
}

void apply_nothing(Config&, const std::string&, const std::string&) {}

std::string show_filters(const std::vector<std::string>& filters) {
  std::string out;
  for (const auto& f : filters) {
    std::string escaped;
    for (char ch : f) {
      escaped += ch == ',' ? std::string(",,") : std::string(1, ch);
    }
    out += (out.empty() ? "" : ",") + escaped;
  }
  return out;
}

void apply_cpu_bind(Config& c, const std::string& value, const std::string& flag) {
  if (value == "none") {
    c.cpu_bind = CpuBind::k_none;
  } else if (value == "cores") {
    c.cpu_bind = CpuBind::k_cores;
  } else if (value == "numa") {
    c.cpu_bind = CpuBind::k_numa;
  } else {
    throw UsageError(flag + " takes none, cores or numa; got '" + value + "'");
  }
}

std::string show_cpu_bind(const Config& c) {
  switch (c.cpu_bind) {
    case CpuBind::k_cores:
      return "cores";
    case CpuBind::k_numa:
      return "numa";
    case CpuBind::k_none:
      break;
  }
  return "none";
}

// torchrun's --numa-binding modes, as --cpu-bind modes.
void apply_numa_binding(Config& c, const std::string& value, const std::string& flag) {
  if (value == "node" || value == "socket") {
    c.cpu_bind = CpuBind::k_numa;
  } else if (value == "exclusive" || value == "core-complex") {
    c.cpu_bind = CpuBind::k_cores;
  } else {
    throw UsageError(flag +
                     " takes node, socket, exclusive or core-complex (torchrun's modes); got '" +
                     value + "'");
  }
  if (value == "socket" || value == "core-complex") {
    c.notes.push_back(flag + " " + value + ": bound as --cpu-bind " + show_cpu_bind(c) +
                      " (ddplaunch binds by NUMA node or by core share)");
  }
}

// mpirun's --map-by: ppr:N:node is N workers per node; slot and core are
// ddplaunch's own order (consecutive ranks fill a node); the rest is refused
// with what to type instead.
void apply_map_by(Config& c, const std::string& value, const std::string& flag) {
  const std::string policy = value.substr(0, value.find(':', value.starts_with("ppr:") ? 4 : 0));
  if (value.starts_with("ppr:") && value.ends_with(":node")) {
    const std::string count = value.substr(4, value.size() - 4 - 5);
    c.nproc_mode = NprocMode::k_fixed;
    c.nproc_per_node =
        parse_int_in(count, flag, 1, k_max_nproc, "ppr:N:node with N from 1 to 4096");
    return;
  }
  if (value == "slot" || value == "core" || value == "hwthread") {
    return;  // ddplaunch's order: ranks fill each node in turn
  }
  if (value.find("PE=") != std::string::npos) {
    throw UsageError(flag + " " + value +
                     ": ddplaunch binds each rank to an equal share of the node's CPUs with "
                     "--cpu-bind cores (PE=n is that share when --nproc-per-node is CPUs/n)");
  }
  if (value.starts_with("ppr:")) {
    throw UsageError(flag + " " + value +
                     ": ddplaunch counts ranks per node: give --nproc-per-node N (N per socket "
                     "times the sockets) and --cpu-bind numa to keep each rank on one NUMA node");
  }
  throw UsageError(flag + " " + value +
                   ": ddplaunch places ranks node by node in RANK order (mpirun's --map-by "
                   "slot); give the count per node with --nproc-per-node N (--map-by ppr:N:node) "
                   "and bind with --cpu-bind");
}

// mpirun's --bind-to, as --cpu-bind.
void apply_bind_to(Config& c, const std::string& value, const std::string& flag) {
  if (value == "none") {
    c.cpu_bind = CpuBind::k_none;
  } else if (value == "core" || value == "hwthread") {
    c.cpu_bind = CpuBind::k_cores;
  } else if (value == "numa" || value == "socket" || value == "package") {
    c.cpu_bind = CpuBind::k_numa;
  } else {
    throw UsageError(flag +
                     " takes core, numa, socket or none (as --cpu-bind cores, numa or "
                     "none); got '" +
                     value + "'");
  }
}

// --preempt-signal: one of the signals the launcher handles, by name
// (USR1, SIGUSR1) or number.
constexpr std::pair<const char*, int> k_preempt_signals[] = {
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGTERM", SIGTERM},
    {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT}};

void apply_preempt_signal(Config& c, const std::string& given, const std::string& flag) {
  std::string value = given;
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  for (const auto& [name, sig] : k_preempt_signals) {
    if (value == name || value == name + 3 || value == std::to_string(sig)) {
      c.preempt_signal = sig;
      return;
    }
  }
  throw UsageError(flag +
                   " takes USR1, USR2, TERM, INT, HUP or QUIT (with or without SIG, or "
                   "its number); got '" +
                   given + "'");
}

// --python-stacks-signal: a signal nothing in Python or ddplaunch uses, and
// that faulthandler accepts.
void apply_python_stacks_signal(Config& c, const std::string& given, const std::string& flag) {
  std::string value = given;
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  if (value.starts_with("SIG")) {
    value.erase(0, 3);
  }
  const int rt_count = SIGRTMAX - SIGRTMIN;
  int sig = 0;
  if (value == "USR1" || value == std::to_string(SIGUSR1)) {
    sig = SIGUSR1;
  } else if (value == "USR2" || value == std::to_string(SIGUSR2)) {
    sig = SIGUSR2;
  } else if (value == "RTMIN") {
    sig = SIGRTMIN;
  } else if (value.starts_with("RTMIN+")) {
    auto n = parse_integer_in(value.substr(6), 0, rt_count);
    sig = n ? SIGRTMIN + static_cast<int>(*n) : 0;
  } else if (auto n = parse_integer_in(value, SIGRTMIN, SIGRTMAX)) {
    sig = static_cast<int>(*n);
  }
  if (sig == 0) {
    throw UsageError(flag + " takes USR1, USR2 or RTMIN+N (N from 0 to " +
                     std::to_string(rt_count) + "), with or without SIG, or its number; got '" +
                     given + "'");
  }
  c.python_stacks_signal = sig;
}

std::string show_python_stacks_signal(const Config& c) {
  if (!c.python_stacks_signal) {
    return {};
  }
  const int sig = *c.python_stacks_signal;
  return sig == SIGUSR1   ? "SIGUSR1"
         : sig == SIGUSR2 ? "SIGUSR2"
                          : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
}

// torchrun's --signals-to-handle: checked; ddplaunch's own handling stays.
void apply_signals_to_handle(Config& c, const std::string& value, const std::string& flag) {
  static const std::set<std::string> known = {"SIGTERM", "SIGINT",  "SIGHUP",
                                              "SIGQUIT", "SIGUSR1", "SIGUSR2"};
  std::set<std::string> listed;
  std::string_view rest = value;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    std::string name(rest.substr(0, comma));
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (!known.contains(name)) {
      throw UsageError(flag + ": '" + name +
                       "' is not a signal ddplaunch handles; give a comma-separated list of "
                       "SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2");
    }
    listed.insert(name);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  std::string left_out;
  for (const char* stop : {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"}) {
    if (!listed.contains(stop)) {
      left_out += (left_out.empty() ? "" : ", ") + std::string(stop);
    }
  }
  if (!left_out.empty()) {
    c.notes.push_back(flag + " leaves out " + left_out +
                      ": ddplaunch still stops the job cleanly on them (their default action "
                      "would leave the workers running)");
  }
}

void apply_env_style(Config& c, const std::string& value, const std::string& flag) {
  c.env_mpi = false;
  c.env_tf = false;
  std::string_view rest = value;
  while (true) {
    const auto comma = rest.find(',');
    const auto style = rest.substr(0, comma);
    if (style == "mpi") {
      c.env_mpi = true;
    } else if (style == "tf") {
      c.env_tf = true;
    } else if (style != "torch") {
      throw UsageError(flag + " takes torch, tf and mpi, comma-separated; got '" + value + "'");
    }
    if (comma == std::string_view::npos) {
      return;
    }
    rest.remove_prefix(comma + 1);
  }
}

#define DDPLAUNCH_STRING(field)                                             \
  [](Config& c, const std::string& v, const std::string&) { c.field = v; }, \
      [](const Config& c) { return c.field; }
#define DDPLAUNCH_SECONDS(field, allow_zero)                  \
  [](Config& c, const std::string& v, const std::string& f) { \
    c.field = parse_seconds(v, f, allow_zero);                \
  },                                                          \
      [](const Config& c) { return show_seconds(c.field); }
#define DDPLAUNCH_FLAG(field)                                                                \
  [](Config& c, const std::string& v, const std::string& f) { c.field = parse_bool(v, f); }, \
      [](const Config& c) { return show_bool(c.field); }

const char* const k_workers = "Workers";
const char* const k_nodes = "Nodes and rendezvous";
const char* const k_supervision = "Supervision";
const char* const k_output = "Output";
const char* const k_hosts = "Starting every node from here";
const char* const k_launcher = "Launcher";
const char* const k_mpirun = "mpirun's spellings (docs/MPI.md)";

// mpirun's options that ddplaunch does without: accepted, and said once why.
void apply_mpirun_noop(Config& c, const std::string&, const std::string& flag) {
  if (flag == "--oversubscribe") {
    c.notes.push_back(
        "--oversubscribe: nothing to do: ddplaunch starts the ranks it is asked to, and tells MPI "
        "ranks to yield the CPU while they wait where a host's ranks outnumber its CPUs");
  } else if (flag == "--use-hwthread-cpus") {
    c.notes.push_back(
        "--use-hwthread-cpus: nothing to do: ddplaunch counts every CPU the kernel lists, "
        "hardware threads included");
  }
}

// mpirun's -c N: CPUs per rank, which ddplaunch gives as an equal share.
void refuse_cpus_per_proc(Config&, const std::string& value, const std::string& flag) {
  throw UsageError(flag + " " + value +
                   ": ddplaunch binds each rank to an equal share of the node's CPUs with "
                   "--cpu-bind cores (and sets OMP_NUM_THREADS to that share); choose the share "
                   "with --nproc-per-node");
}

void apply_hosts(Config& c, const std::string& value, const std::string& flag) {
  c.hosts = parse_host_list(value, flag);
}

std::string show_hosts(const Config& c) {
  std::string out;
  for (const auto& h : c.hosts) {
    out += (out.empty() ? "" : ",") + h.host + (h.slots ? ":" + std::to_string(*h.slots) : "");
  }
  return out;
}

void apply_launcher(Config& c, const std::string& value, const std::string& flag) {
  if (value == "ssh") {
    c.launcher = Launcher::k_ssh;
  } else if (value == "srun") {
    c.launcher = Launcher::k_srun;
  } else if (value == "local") {
    c.launcher = Launcher::k_local;
  } else if (value == "auto") {
    c.launcher = Launcher::k_auto;
  } else {
    throw UsageError(flag + " takes ssh, srun, local or auto; got '" + value + "'");
  }
}

std::string show_launcher(const Config& c) {
  switch (c.launcher) {
    case Launcher::k_ssh:
      return "ssh";
    case Launcher::k_srun:
      return "srun";
    case Launcher::k_local:
      return "local";
    case Launcher::k_auto:
      break;
  }
  return "auto";
}

// A repeatable option's values, one a line (as cli/ joins them).
std::vector<std::string> lines_of(const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find('\n', start);
    end = end == std::string::npos ? value.size() : end;
    out.push_back(value.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string show_lines(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) {
    out += (out.empty() ? "" : " ") + v;
  }
  return out;
}

void apply_export(Config& c, const std::string& value, const std::string& flag) {
  for (auto& item : lines_of(value)) {
    const std::string name = item.substr(0, item.find('='));
    const bool ok = !name.empty() &&
                    name.find_first_not_of(
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789_") == std::string::npos &&
                    !(name[0] >= '0' && name[0] <= '9');
    if (!ok) {
      throw UsageError(flag + " takes VAR or VAR=value with VAR a variable name; got '" + item +
                       "'");
    }
    c.env_export.push_back(std::move(item));
  }
}

void apply_env_forward(Config& c, const std::string& value, const std::string& flag) {
  for (auto& item : lines_of(value)) {
    if (item.empty() || item.find_first_of("= \t") != std::string::npos) {
      throw UsageError(flag +
                       " takes a variable name or a glob like 'NCCL_*' (or 'none' to "
                       "forward only what -x names); got '" +
                       item + "'");
    }
    c.env_forward.push_back(std::move(item));
  }
}

// clang-format off
const OptionSpec k_options[] = {
  {"nproc_per_node", "-N,--nproc-per-node,--nproc_per_node,--npernode", k_workers,
   "Workers on this node: N, auto (GPUs if any, else CPUs), cpu, gpu or xpu (Intel GPUs); "
   "mpirun's -N and -npernode",
   false,
   "PET_NPROC_PER_NODE", nullptr, apply_nproc, show_nproc},
  {"module", "-m,--module", k_workers, "Run the program as a Python module: python -m program",
   true, "PET_MODULE", nullptr, DDPLAUNCH_FLAG(module)},
  {"no_python", "--no-python,--no_python", k_workers,
   "Run the program as given, even if it ends in .py", true, "PET_NO_PYTHON", nullptr,
   DDPLAUNCH_FLAG(no_python)},
  {"no_pmix", "--no-pmix,--no_pmix", k_workers,
   "Host no PMIx server for the workers: MPI programs then cannot initialise (docs/MPI.md)", true,
   nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) { c.pmix = !parse_bool(v, f); },
   [](const Config& c) { return show_bool(!c.pmix); }},
  {"python", "--python", k_workers, "Python for .py programs (empty: $PYTHON_EXEC, else python3)",
   false, nullptr, nullptr, DDPLAUNCH_STRING(python)},
  {"role", "--role", k_workers, "ROLE_NAME given to the workers", false, "PET_ROLE", nullptr,
   DDPLAUNCH_STRING(role)},
  {"env_style", "--env-style,--env_style", k_workers,
   "Worker environment styles besides torch's, comma-separated: tf (TF_CONFIG), mpi "
   "(OMPI_COMM_WORLD_*, AZ_BATCH_MASTER_NODE)",
   false, nullptr, nullptr, apply_env_style,
   [](const Config& c) {
     return std::string("torch") + (c.env_tf ? ",tf" : "") + (c.env_mpi ? ",mpi" : "");
   }},
  {"tf_chief", "--tf-chief,--tf_chief", k_workers,
   "TF_CONFIG with a chief: rank 0 is chief:0 (implies --env-style tf)", true, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.tf_chief = parse_bool(v, f);
     c.env_tf = c.env_tf || c.tf_chief;
   },
   [](const Config& c) { return show_bool(c.tf_chief); }},
  {"tf_ps", "--tf-ps,--tf_ps", k_workers,
   "TF_CONFIG with N parameter servers: the ranks after the chief (implies --env-style tf)",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.tf_ps = parse_int_in(v, f, 0, 65536, "a number of parameter servers");
     c.env_tf = c.env_tf || c.tf_ps > 0;
   },
   [](const Config& c) { return std::to_string(c.tf_ps); }},
  {"local_rank_arg", "--local-rank-arg,--local_rank_arg", k_workers,
   "Pass --local-rank=N (dash, as torch.distributed.launch 2.x) or --local_rank=N (underscore, "
   "1.x) as the script's first argument",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     if (v != "dash" && v != "underscore" && v != "none") {
       throw UsageError(f + " must be dash, underscore or none, got '" + v + "'");
     }
     c.local_rank_arg = v == "none" ? "" : v;
   },
   [](const Config& c) { return c.local_rank_arg.empty() ? "none" : c.local_rank_arg; }},
  {"run_path", "--run-path,--run_path", k_workers,
   "Run the program with Python whatever its name, even with --no-python (torchrun's runpy)",
   true, "PET_RUN_PATH", nullptr, DDPLAUNCH_FLAG(run_path)},
  {"gpus_per_proc", "--gpus-per-proc,--gpus_per_proc", k_workers,
   "Give each local rank its own K of this node's GPUs through CUDA_VISIBLE_DEVICES", false,
   nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.gpus_per_proc = parse_int_in(v, f, 1, 1024, "a number of GPUs from 1 to 1024");
   },
   [](const Config& c) {
     return c.gpus_per_proc == 0 ? std::string("off") : std::to_string(c.gpus_per_proc);
   }},
  {"virtual_local_rank", "--virtual-local-rank,--virtual_local_rank", k_workers,
   "LOCAL_RANK=0 for every worker, and CUDA_VISIBLE_DEVICES its one assigned GPU (torchrun's)",
   true, "PET_VIRTUAL_LOCAL_RANK", nullptr, DDPLAUNCH_FLAG(virtual_local_rank)},
  {"cpu_bind", "--cpu-bind,--cpu_bind", k_workers,
   "Bind local ranks to CPUs: none, cores (a share of the allowed CPUs each) or numa (a NUMA "
   "node each); OMP_NUM_THREADS is the share unless set",
   false, nullptr, nullptr, apply_cpu_bind, show_cpu_bind},
  {"map_by", "--map-by", k_workers,
   "mpirun's form: ppr:N:node is --nproc-per-node N; slot and core are ddplaunch's order", false,
   nullptr, "nproc_per_node", apply_map_by, nullptr},
  {"bind_to", "--bind-to", k_workers,
   "mpirun's form: core is --cpu-bind cores, numa or socket is --cpu-bind numa, none is none",
   false, nullptr, "cpu_bind", apply_bind_to, nullptr},
  {"numa_binding", "--numa-binding,--numa_binding", k_workers,
   "torchrun's form: node or socket is --cpu-bind numa, exclusive or core-complex is --cpu-bind "
   "cores", false, nullptr, nullptr, apply_numa_binding, nullptr},
  {"report_bindings", "--report-bindings,--report_bindings", k_workers,
   "Print each local rank's CPUs and GPUs at start", true, nullptr, nullptr,
   DDPLAUNCH_FLAG(report_bindings)},
  {"use_env", "--use-env,--use_env", k_workers,
   "Accepted for torch.distributed.launch scripts: the environment is always set", true,
   nullptr, nullptr, apply_nothing, nullptr},
  {"max_restarts", "--max-restarts,--max_restarts", k_workers,
   "Restart every worker of every node up to N times when a rank fails (one count for the "
   "whole job; TORCHELASTIC_RESTART_COUNT says which round)",
   false,
   "PET_MAX_RESTARTS", nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.max_restarts = parse_int_in(v, f, 0, 1000000, "a number from 0 to 1000000");
   },
   [](const Config& c) { return std::to_string(c.max_restarts); }},
  {"restart_min_progress", "--restart-min-progress,--restart_min_progress", k_workers,
   "Count a failed round against --max-restarts only when some node's ranks made K progress "
   "events in it (output lines, DDPLAUNCH_PROGRESS_FD writes); 0: every failure counts",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.restart_min_progress = parse_int_in(v, f, 0, 1000000000, "a number from 0 to 1000000000");
   },
   [](const Config& c) { return std::to_string(c.restart_min_progress); }},
  {"restart_reclaim_timeout", "--restart-reclaim-timeout,--restart_reclaim_timeout", k_workers,
   "Seconds a node waits, before a restart, for every process its last round left to be gone "
   "(they are killed) and, with NVML, for its workers' GPU memory to be released; a node still "
   "holding either then leaves the job",
   false, nullptr, nullptr, DDPLAUNCH_SECONDS(restart_reclaim_timeout_s, true)},
  {"max_no_progress_restarts", "--max-no-progress-restarts,--max_no_progress_restarts", k_workers,
   "With --restart-min-progress: end the job after this many failed rounds in a row without "
   "progress",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.max_no_progress_restarts = parse_int_in(v, f, 0, 1000000, "a number from 0 to 1000000");
     if (c.restart_min_progress == 0) {
       // (--restart-min-progress comes first in this table.) Alone, it means
       // what it says only if rounds are told apart by their progress.
       c.restart_min_progress = 1;
       c.notes.push_back(f + " " + v +
                         " follows progress: --restart-min-progress 1 (a round with at least one "
                         "progress event made progress); give --restart-min-progress K to say "
                         "how many");
     }
   },
   [](const Config& c) { return std::to_string(c.max_no_progress_restarts); }},

  {"nnodes", "--nnodes", k_nodes,
   "Number of nodes, or MIN:MAX for an elastic job (it starts with MIN to MAX nodes; nodes may "
   "leave and join between rounds)",
   false, "PET_NNODES", nullptr, apply_nnodes,
   [](const Config& c) {
     return c.elastic() ? std::to_string(c.nnodes_min) + ":" + std::to_string(c.nnodes)
                        : std::to_string(c.nnodes);
   }},
  {"node_rank", "--node-rank,--node_rank", k_nodes,
   "This node's rank, or auto (the store host is 0, others by arrival)", false, "PET_NODE_RANK",
   nullptr, apply_node_rank,
   [](const Config& c) { return c.node_rank ? std::to_string(*c.node_rank) : std::string("auto"); }},
  {"master_addr", "--master-addr,--master_addr", k_nodes,
   "Address of node 0, where the store runs", false, "PET_MASTER_ADDR", nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     if (v.empty()) {
       throw UsageError(f + " must not be empty; give node 0's host name or address");
     }
     c.master_addr = v;
   },
   [](const Config& c) { return c.master_addr; }},
  {"master_port", "--master-port,--master_port", k_nodes, "Port of the store", false,
   "PET_MASTER_PORT", nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.master_port = parse_int_in(v, f, 1, 65535, "a port from 1 to 65535");
   },
   [](const Config& c) { return std::to_string(c.master_port); }},
  {"rdzv_endpoint", "--rdzv-endpoint,--rdzv_endpoint", k_nodes,
   "HOST[:PORT] or [IPV6][:PORT]: --master-addr HOST --master-port PORT (29400 when not "
   "given; 0: any free port, one node only)",
   false, "PET_RDZV_ENDPOINT",
   "master_addr,master_port", apply_endpoint, nullptr},
  {"rdzv_id", "--rdzv-id,--rdzv_id", k_nodes, "Job id every node must agree on", false,
   "PET_RDZV_ID", nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     if (v.empty()) {
       throw UsageError(f + " must not be empty; give the job a name every node agrees on");
     }
     c.rdzv_id = v;
   },
   [](const Config& c) { return c.rdzv_id; }},
  {"rdzv_backend", "--rdzv-backend,--rdzv_backend", k_nodes,
   "Accepted for torchrun scripts: static or c10d (both use ddplaunch's store)", false,
   "PET_RDZV_BACKEND", nullptr, apply_backend, [](const Config& c) { return c.rdzv_backend; }},
  {"rdzv_conf", "--rdzv-conf,--rdzv_conf", k_nodes,
   "torchrun's KEY=VALUE,...: last_call_timeout=S is --rdzv-last-call; other keys are ignored",
   false, "PET_RDZV_CONF", nullptr, apply_rdzv_conf, nullptr},
  {"rdzv_last_call", "--rdzv-last-call,--rdzv_last_call", k_nodes,
   "Elastic jobs: seconds to wait for more nodes once MIN have joined (none once MAX have)",
   false, nullptr, nullptr, DDPLAUNCH_SECONDS(rdzv_last_call_s, true)},
  {"rdzv_timeout", "--rdzv-timeout,--rdzv_timeout", k_nodes,
   "Seconds to wait for every node to join", false, nullptr, nullptr,
   DDPLAUNCH_SECONDS(rdzv_timeout_s, false)},
  {"worker_port", "--worker-port,--worker_port", k_nodes,
   "MASTER_PORT for the workers (default: a free port on the master host)", false, nullptr,
   nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.worker_port = parse_int_in(v, f, 1, 65535, "a port from 1 to 65535");
   },
   nullptr},
  {"local_addr", "--local-addr,--local_addr", k_nodes,
   "Address this node advertises (default: the one its packets to node 0 leave from)", false,
   "PET_LOCAL_ADDR", nullptr, DDPLAUNCH_STRING(local_addr)},
  {"store_bind", "--store-bind,--store_bind", k_nodes,
   "Address node 0's store listens on (default: every interface; loopback for a loopback "
   "--master-addr)", false, nullptr, nullptr, DDPLAUNCH_STRING(store_bind)},
  {"rdzv_token_file", "--rdzv-token-file,--rdzv_token_file", k_nodes,
   "File holding the job's secret: the store then admits only nodes that know it (or set "
   "DDPLAUNCH_RDZV_TOKEN)", false, nullptr, nullptr, DDPLAUNCH_STRING(rdzv_token_file)},
  {"strict_token", "--strict-token,--strict_token", k_nodes,
   "Refuse a token file that other users may read or write (default: warn)", true, nullptr,
   nullptr, DDPLAUNCH_FLAG(strict_token)},
  {"rdzv_max_clients", "--rdzv-max-clients,--rdzv_max_clients", k_nodes,
   "Authenticated connections node 0's store holds at once (at least one per node plus 64, "
   "whatever is given; one more retries)", false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.rdzv_max_clients = parse_int_in(v, f, 4, 1'000'000, "a number from 4 to 1000000");
   },
   [](const Config& c) { return std::to_string(c.rdzv_max_clients); }},
  {"tree_fanout", "--tree-fanout,--tree_fanout", k_nodes,
   "Children of each node in the tree of agents that PMIx fences among every node, the "
   "round's verdict, heartbeats, the network preflight's reports and `ddplaunch status` "
   "travel past N + 1 nodes, node 0 at its root (node 0's decides for the job)",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.tree_fanout = parse_int_in(v, f, Config::k_min_tree_fanout, Config::k_max_tree_fanout, "a number from 2 to 64");
   },
   [](const Config& c) { return std::to_string(c.tree_fanout); }},
  {"heartbeat_interval", "--heartbeat-interval", k_nodes,
   "Seconds between liveness reports to the store (past --tree-fanout + 1 nodes, below "
   "node 0's children: to the node's parent in the tree)",
   false, nullptr, nullptr,
   DDPLAUNCH_SECONDS(heartbeat_interval_s, false)},
  {"heartbeat_timeout", "--heartbeat-timeout", k_nodes,
   "Seconds of silence after which a node is declared lost", false, nullptr, nullptr,
   DDPLAUNCH_SECONDS(heartbeat_timeout_s, false)},
  {"preflight", "--preflight", k_nodes,
   "Before a multi-node job's first workers start, every node connects to node 0's MASTER_PORT "
   "and to its peers' probe ports; a blocked path ends the job (exit 3) naming both nodes",
   true, nullptr, nullptr, DDPLAUNCH_FLAG(preflight)},
  {"no_preflight", "--no-preflight,--no_preflight", k_nodes, "Skip the network preflight", true,
   nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) { c.preflight = !parse_bool(v, f); },
   [](const Config& c) { return show_bool(!c.preflight); }},
  {"preflight_timeout", "--preflight-timeout,--preflight_timeout", k_nodes,
   "Seconds the network preflight waits for each connect", false, nullptr, nullptr,
   DDPLAUNCH_SECONDS(preflight_timeout_s, false)},
  {"standalone", "--standalone", k_nodes, "One node; the same as --nnodes 1", true,
   "PET_STANDALONE", nullptr, DDPLAUNCH_FLAG(standalone)},

  {"shutdown_timeout", "--shutdown-timeout,--shutdown_timeout", k_supervision,
   "torchrun's name for --term-timeout (also TORCH_ELASTIC_SHUTDOWN_TIMEOUT)", false,
   "PET_SHUTDOWN_TIMEOUT", "term_timeout", DDPLAUNCH_SECONDS(term_timeout_s, true)},
  {"term_timeout", "--term-timeout,--term_timeout", k_supervision,
   "Seconds between SIGTERM and SIGKILL when stopping workers", false, nullptr, nullptr,
   DDPLAUNCH_SECONDS(term_timeout_s, true)},
  {"hang_timeout", "--hang-timeout,--hang_timeout", k_supervision,
   "Seconds without progress (an output line, or a write to DDPLAUNCH_PROGRESS_FD) after "
   "which the job is hung: every rank without progress gives its stacks, then the job "
   "fails; 0: off",
   false, nullptr, nullptr, DDPLAUNCH_SECONDS(hang_timeout_s, true)},
  {"preempt_signal", "--preempt-signal,--preempt_signal", k_supervision,
   "A signal (USR1, USR2, TERM, INT, HUP, QUIT) that preempts the job: any node receiving it "
   "sends it to every rank of every node, which has --term-timeout to checkpoint and exit; the "
   "job then exits 75",
   false, nullptr, nullptr, apply_preempt_signal,
   [](const Config& c) {
     for (const auto& [name, sig] : k_preempt_signals) {
       if (c.preempt_signal == sig) {
         return std::string(name);
       }
     }
     return std::string();
   }},
  {"python_stacks_signal", "--python-stacks-signal,--python_stacks_signal", k_supervision,
   "A signal (USR1, USR2, RTMIN+N) that every Python process of the job answers with every "
   "thread's stack (faulthandler, armed by a sitecustomize.py ddplaunch puts first on "
   "PYTHONPATH): `ddplaunch stacks` then shows Python frames without gdb; choose one your "
   "program does not use",
   false, nullptr, nullptr, apply_python_stacks_signal, show_python_stacks_signal},
  {"health_check", "--health-check,--health_check", k_supervision,
   "Shell command each node runs before it joins; a node whose command fails (or runs past "
   "--health-check-timeout) does not join. `ddplaunch check` runs the built-in checks",
   false, nullptr, nullptr, DDPLAUNCH_STRING(health_check)},
  {"health_check_timeout", "--health-check-timeout,--health_check_timeout", k_supervision,
   "Seconds a health check may run before it has failed", false, nullptr, nullptr,
   DDPLAUNCH_SECONDS(health_check_timeout_s, false)},
  {"summary_json", "--summary-json,--summary_json", k_supervision,
   "Write every rank's outcome to this file as JSON", false, nullptr, nullptr,
   DDPLAUNCH_STRING(summary_json)},
  {"event_log", "--event-log,--event_log", k_supervision,
   "Append every event of the job to this file, one JSON object a line ({node_rank} is this "
   "node's rank; -: stderr; docs/EVENTS.md)",
   false, nullptr, nullptr, DDPLAUNCH_STRING(event_log)},
  {"metrics_port", "--metrics-port,--metrics_port", k_supervision,
   "Serve this node's OpenMetrics at http://ADDR:P/metrics, and on node 0 a live page of the "
   "job at / (docs/METRICS.md); 0: no listener",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.metrics_port = parse_int_in(v, f, 0, 65535, "a port from 1 to 65535 (0: none)");
   },
   [](const Config& c) { return std::to_string(c.metrics_port); }},
  {"metrics_bind", "--metrics-bind,--metrics_bind", k_supervision,
   "The address --metrics-port listens on: an IP address of this host (0.0.0.0: all)", false,
   nullptr, nullptr, DDPLAUNCH_STRING(metrics_bind)},
  {"monitor_interval", "--monitor-interval,--monitor_interval", k_supervision,
   "Accepted for torchrun scripts; ignored (ddplaunch is event-driven)", false,
   "PET_MONITOR_INTERVAL", nullptr, apply_nothing, nullptr},
  {"start_method", "--start-method,--start_method", k_supervision,
   "Accepted for torchrun scripts; ignored", false, "PET_START_METHOD", nullptr, apply_nothing,
   nullptr},
  {"event_log_handler", "--event-log-handler,--event_log_handler", k_supervision,
   "Accepted for torchrun scripts: console writes the event log to stderr (as --event-log -), "
   "null none",
   false, "PET_EVENT_LOG_HANDLER", nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     if (v == "console") {
       if (c.event_log.empty()) {
         c.event_log = "-";  // torchrun's console handler logs each event; --event-log wins
       }
     } else if (v != "null" && !v.empty()) {
       c.notes.push_back(f + " " + v +
                         " is ignored: ddplaunch's events go to --event-log (console: to "
                         "stderr)");
     }
   },
   nullptr},
  {"signals_to_handle", "--signals-to-handle,--signals_to_handle", k_supervision,
   "Accepted for torchrun scripts and checked: SIGINT, SIGTERM, SIGHUP and SIGQUIT always stop "
   "the job, SIGUSR1 and SIGUSR2 always reach every worker",
   false, "PET_SIGNALS_TO_HANDLE", nullptr, apply_signals_to_handle, nullptr},

  {"prefix", "--prefix", k_output,
   "Line prefix; fields {rank} {local_rank} {node_rank} {host} {time} (an absolute path is "
   "mpirun's --prefix DIR, its install prefix: ignored)",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     if (v.starts_with("/") && v.find('{') == std::string::npos) {
       // mpirun's --prefix: where Open MPI is installed on the remote hosts.
       c.notes.push_back(f + " " + v +
                         ": taken as mpirun's --prefix (Open MPI's install directory), which "
                         "ddplaunch does not need; the line prefix stays '" + c.prefix + "'");
       return;
     }
     validate_prefix_template(v);
     c.prefix = v;
   },
   [](const Config& c) { return c.prefix; }},
  {"no_prefix", "--no-prefix", k_output, "Print workers' lines without a prefix", true, nullptr,
   "prefix",
   [](Config& c, const std::string& v, const std::string& f) {
     if (parse_bool(v, f)) {
       c.prefix.clear();
     }
   },
   nullptr},
  {"stdout_tty", "--stdout-tty", k_output,
   "Give each rank's stdout a terminal so C and Fortran stdio writes each line at once: auto "
   "(for a native program linked with MPI, as mpirun does), yes or no",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     if (v == "auto") {
       c.stdout_tty = StdoutTty::k_auto;
     } else if (v == "yes") {
       c.stdout_tty = StdoutTty::k_yes;
     } else if (v == "no") {
       c.stdout_tty = StdoutTty::k_no;
     } else {
       throw UsageError(f + " takes auto, yes or no; got '" + v + "'");
     }
   },
   [](const Config& c) -> std::string {
     switch (c.stdout_tty) {
       case StdoutTty::k_yes:
         return "yes";
       case StdoutTty::k_no:
         return "no";
       case StdoutTty::k_auto:
         break;
     }
     return "auto";
   }},
  {"log_dir", "--log-dir,--log_dir", k_output,
   "Also write each rank's stdout and stderr to DIR/RANK/{stdout,stderr}.log", false,
   "PET_LOG_DIR", nullptr, DDPLAUNCH_STRING(log_dir)},
  {"redirects", "-r,--redirects", k_output,
   "Send these streams to the log files only: 0 none, 1 out, 2 err, 3 both, or 0:1,1:2", false,
   "PET_REDIRECTS", nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.redirects = parse_stream_selection(v, f);
   },
   [](const Config& c) { return show_selection(c.redirects); }},
  {"tee", "-t,--tee", k_output, "Send these streams to the log files and the console", false,
   "PET_TEE", nullptr,
   [](Config& c, const std::string& v, const std::string& f) { c.tee = parse_stream_selection(v, f); },
   [](const Config& c) { return show_selection(c.tee); }},
  {"ranks_filter", "--ranks-filter,--ranks_filter", k_output,
   "Only these global ranks reach the console, e.g. 0,3 (files get all)", false, nullptr,
   nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.ranks_filter = parse_rank_list(v, f);
   },
   [](const Config& c) { return show_ranks(c.ranks_filter); }},
  {"local_ranks_filter", "--local-ranks-filter,--local_ranks_filter", k_output,
   "Only these local ranks reach the console", false, "PET_LOCAL_RANKS_FILTER", nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.local_ranks_filter = parse_rank_list(v, f);
   },
   [](const Config& c) { return show_ranks(c.local_ranks_filter); }},
  {"duplicate_stdout_filters", "--duplicate-stdout-filters,--duplicate_stdout_filters", k_output,
   "Also copy stdout lines holding any of these comma-separated strings (,, is a comma) to the "
   "node's filtered_stdout.log", false, "PET_DUPLICATE_STDOUT_FILTERS", nullptr,
   [](Config& c, const std::string& v, const std::string&) {
     c.duplicate_stdout_filters = parse_filter_list(v);
   },
   [](const Config& c) { return show_filters(c.duplicate_stdout_filters); }},
  {"duplicate_stderr_filters", "--duplicate-stderr-filters,--duplicate_stderr_filters", k_output,
   "The same for stderr lines, to the node's filtered_stderr.log", false,
   "PET_DUPLICATE_STDERR_FILTERS", nullptr,
   [](Config& c, const std::string& v, const std::string&) {
     c.duplicate_stderr_filters = parse_filter_list(v);
   },
   [](const Config& c) { return show_filters(c.duplicate_stderr_filters); }},
  {"logs_specs", "--logs-specs,--logs_specs", k_output,
   "Accepted for torchrun scripts: the log layout is --log-dir's (no plugins)", false, nullptr,
   nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.notes.push_back(f + " " + v +
                       " is ignored: ddplaunch has no log plugins; --log-dir DIR writes "
                       "DIR/<rank>/{stdout,stderr}.log");
   },
   nullptr},

  {"hosts", "-H,--hosts,--host", k_hosts,
   "Start the job on these hosts, one agent each, from this command: HOST[:SLOTS],... "
   "(node 0 first; SLOTS is the host's --nproc-per-node)", false, nullptr, nullptr,
   apply_hosts, show_hosts},
  {"hostfile", "--hostfile", k_hosts,
   "Like --hosts, from a file of 'HOST slots=N' lines (mpirun's and DeepSpeed's format)", false,
   nullptr, nullptr, DDPLAUNCH_STRING(hostfile)},
  {"launcher", "--launcher", k_hosts,
   "How agents start: ssh (the default with hosts), srun (the default in a Slurm allocation "
   "outside a step), local (every agent here), auto", false, nullptr, nullptr, apply_launcher,
   show_launcher},
  {"env_export", "-x", k_hosts,
   "Pass VAR (or set VAR=value) to every remote agent and worker; repeatable (mpirun's -x)",
   false, nullptr, nullptr, apply_export,
   [](const Config& c) { return show_lines(c.env_export); }, true},
  {"env_forward", "--env-forward", k_hosts,
   "Also forward the variables matching this glob; repeatable; 'none' drops the default "
   "patterns (docs/HOSTS.md)", false, nullptr, nullptr, apply_env_forward,
   [](const Config& c) { return show_lines(c.env_forward); }, true},
  {"ssh_args", "--ssh-args", k_hosts, "Extra ssh arguments, space-separated (-F FILE, -i KEY)",
   false, nullptr, nullptr, DDPLAUNCH_STRING(ssh_args)},
  {"ssh_port", "--ssh-port", k_hosts, "ssh port (0: ssh's own choice)", false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.ssh_port = parse_int_in(v, f, 0, 65535, "a port from 0 to 65535");
   },
   [](const Config& c) { return std::to_string(c.ssh_port); }},
  {"remote_cwd", "--remote-cwd", k_hosts,
   "Directory the remote agents start in (empty: this directory)", false, nullptr, nullptr,
   DDPLAUNCH_STRING(remote_cwd)},
  {"remote_ddplaunch", "--remote-ddplaunch", k_hosts,
   "ddplaunch on the remote hosts (empty: this binary's path if there, else ddplaunch on PATH)",
   false, nullptr, nullptr, DDPLAUNCH_STRING(remote_ddplaunch)},
  {"fanout", "--fanout", k_hosts,
   "The most ssh connections one host opens; above it, agents start further agents in a tree",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.fanout = parse_int_in(v, f, 2, 1024, "a number from 2 to 1024");
   },
   [](const Config& c) { return std::to_string(c.fanout); }},

  // mpirun's own spellings (its single-dash forms, -mca K V and -gmca K V, are
  // rewritten to these by the command line's parser).
  {"oversubscribe", "--oversubscribe", k_mpirun,
   "Accepted: MPI ranks yield the CPU while they wait where a host's ranks outnumber its CPUs",
   true, nullptr, nullptr, apply_mpirun_noop, nullptr},
  {"allow_run_as_root", "--allow-run-as-root", k_mpirun, "Accepted: ddplaunch runs as any user",
   true, nullptr, nullptr, apply_mpirun_noop, nullptr},
  {"use_hwthread_cpus", "--use-hwthread-cpus", k_mpirun,
   "Accepted: every CPU the kernel lists counts, hardware threads included", true, nullptr,
   nullptr, apply_mpirun_noop, nullptr},
  {"tag_output", "--tag-output", k_mpirun,
   "Accepted: each line already carries its rank (--prefix)", true, nullptr, nullptr,
   apply_mpirun_noop, nullptr},
  {"timestamp_output", "--timestamp-output", k_mpirun,
   "Start each line's prefix with the time ({time} in --prefix)", true, nullptr, "prefix",
   [](Config& c, const std::string& v, const std::string& f) {
     if (parse_bool(v, f) && c.prefix.find("{time}") == std::string::npos) {
       c.prefix = "[{time}] " + c.prefix;
     }
   },
   nullptr},
  {"output_filename", "--output-filename", k_mpirun, "Write each rank's output under DIR: --log-dir",
   false, nullptr, "log_dir",
   [](Config& c, const std::string& v, const std::string&) { c.log_dir = v; }, nullptr},
  {"merge_stderr", "--merge-stderr-to-stdout", k_mpirun,
   "Print the workers' stderr lines on stdout", true, nullptr, nullptr,
   DDPLAUNCH_FLAG(merge_stderr)},
  {"display_map", "--display-map", k_mpirun,
   "Print where each rank runs at start: --report-bindings", true, nullptr, "report_bindings",
   [](Config& c, const std::string& v, const std::string& f) {
     c.report_bindings = c.report_bindings || parse_bool(v, f);
   },
   nullptr},
  {"wdir", "--wdir,--wd", k_mpirun,
   "Run in DIR, here and on every host (mpirun's -wdir; --remote-cwd for the other hosts)",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string&) {
     c.wdir = v;
     if (c.remote_cwd.empty()) {
       c.remote_cwd = v;  // (--remote-cwd comes first in this table)
     }
   },
   [](const Config& c) { return c.wdir; }},
  {"quiet", "-q,--quiet", k_mpirun, "Say only warnings and errors: --log-level warn", true,
   nullptr, "log_level",
   [](Config& c, const std::string& v, const std::string& f) {
     if (parse_bool(v, f)) {
       c.log_level = "warn";
     }
   },
   nullptr},
  {"cpus_per_proc", "-c,--cpus-per-proc,--cpus-per-rank", k_mpirun,
   "Refused, with its equivalent: --cpu-bind cores gives each rank an equal share", false,
   nullptr, nullptr, refuse_cpus_per_proc, nullptr},

  // Set by a launching command for the agents it starts (src/launcher/).
  {"launcher_channel", "--launcher-channel", "",
   "Read the job token and environment from stdin (docs/PROTOCOL.md)", true, nullptr, nullptr,
   DDPLAUNCH_FLAG(launcher_channel)},
  {"pick_store_port", "--pick-store-port", "",
   "Node 0 under a launching command: the store listens on a free port, said on stdout", true,
   nullptr, nullptr, DDPLAUNCH_FLAG(pick_store_port)},
  {"subtree", "--subtree", "",
   "Start the --hosts listed as nodes N.. of a larger job, the first being this host", false,
   nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.subtree = parse_int_in(v, f, 0, k_max_nodes - 1, "a node rank");
   },
   [](const Config& c) { return std::to_string(c.subtree); }},

  {"dry_run", "--dry-run", k_launcher,
   "Print the configuration, where each value came from, and every local rank's environment "
   "as JSON; launch nothing", true, nullptr, nullptr, DDPLAUNCH_FLAG(dry_run)},
  {"log_level", "--log-level", k_launcher, "trace, debug, info, warn, error or off", false,
   nullptr, nullptr, apply_log_level, [](const Config& c) { return c.log_level; }},
  // Last: it reads --nnodes and --nproc-per-node.
  {"np", "-n,--np", k_workers,
   "mpirun's total process count (also -np): with --nnodes M, M nodes of np/M workers; it must "
   "agree with --nproc-per-node",
   false, nullptr, nullptr,
   [](Config& c, const std::string& v, const std::string& f) {
     c.np = parse_int_in(v, f, 1, 1 << 30, "a number of processes");
     // After --nnodes and --nproc-per-node (the table's order): it gives the
     // count per node unless one was given; validate() checks they agree.
     if (c.nproc_mode == NprocMode::k_fixed && c.nproc_per_node == 1 && *c.np % c.nnodes == 0) {
       c.nproc_per_node = *c.np / c.nnodes;
     }
   },
   [](const Config& c) { return c.np ? std::to_string(*c.np) : std::string(); }},
};
// clang-format on

#undef DDPLAUNCH_STRING
#undef DDPLAUNCH_SECONDS
#undef DDPLAUNCH_FLAG

}  // namespace

std::span<const OptionSpec> option_table() {
  return k_options;
}

const OptionSpec* find_option(std::string_view key) {
  for (const auto& o : k_options) {
    if (key == o.key) {
      return &o;
    }
  }
  return nullptr;
}

std::string long_name(const OptionSpec& spec) {
  std::string_view names = spec.names;
  size_t start = names.find("--");
  if (start == std::string_view::npos) {
    start = 0;  // a short option only: -x
  }
  size_t end = names.find(',', start);
  return std::string(names.substr(start, end == std::string_view::npos ? end : end - start));
}

StreamSelection parse_stream_selection(std::string_view value, std::string_view flag) {
  const std::string what = std::string(flag) +
                           " must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both), "
                           "or LOCAL_RANK:VALUE pairs like 0:1,1:2; got '" +
                           std::string(value) + "'";
  StreamSelection sel;
  if (value.find(':') == std::string_view::npos) {
    auto v = parse_integer(value);
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
    auto rank = parse_integer(pair.substr(0, colon));
    auto v = parse_integer(pair.substr(colon + 1));
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

std::vector<std::string> parse_filter_list(std::string_view value) {
  std::vector<std::string> out;
  std::string item;
  for (size_t i = 0; i <= value.size(); ++i) {
    if (i + 1 < value.size() && value[i] == ',' && value[i + 1] == ',') {
      item += ',';
      ++i;
    } else if (i == value.size() || value[i] == ',') {
      if (!item.empty()) {
        out.push_back(std::move(item));
      }
      item.clear();
    } else {
      item += value[i];
    }
  }
  return out;
}

std::set<int> parse_rank_list(std::string_view value, std::string_view flag) {
  constexpr long long k_max_rank = 1'000'000'000;
  constexpr size_t k_max_members = 1'000'000;
  std::set<int> ranks;
  const std::string what = std::string(flag) +
                           " must be a comma-separated list of ranks like 0,3 or 0-7,9; got '" +
                           std::string(value) + "'";
  if (value.empty()) {
    throw UsageError(what);
  }
  while (true) {
    const auto comma = value.find(',');
    const std::string_view item = value.substr(0, comma);
    const auto dash = item.find('-');
    const auto lo = parse_integer(item.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : parse_integer(item.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi > k_max_rank ||
        static_cast<size_t>(*hi - *lo) >= k_max_members - ranks.size()) {
      throw UsageError(what);
    }
    for (long long r = *lo; r <= *hi; ++r) {
      ranks.insert(static_cast<int>(r));
    }
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

}  // namespace ddplaunch
