#include "config/config.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "config/launch_error.hpp"

namespace ddplaunch {

int StreamSelection::for_local_rank(int local_rank) const {
  auto it = per_local_rank.find(local_rank);
  return it == per_local_rank.end() ? all : it->second;
}

std::string Config::source_of(const std::string& key) const {
  auto it = sources.find(key);
  return it == sources.end() ? "default" : it->second;
}

std::optional<std::string> Config::filter_matches_nothing(int world_size,
                                                          int local_world_size) const {
  auto none_below = [](const std::set<int>& ranks, int size) {
    return ranks.empty() || *ranks.begin() >= size;
  };
  auto listed = [](const std::set<int>& ranks) {
    std::string out;
    for (int r : ranks) {
      out += (out.empty() ? "" : ",") + std::to_string(r);
    }
    return out;
  };
  if (ranks_filter && none_below(*ranks_filter, world_size)) {
    return "--ranks-filter " + listed(*ranks_filter) + " matches no rank of this job (ranks 0-" +
           std::to_string(world_size - 1) +
           "): no worker's line reaches the console (log files still get them)";
  }
  if (local_ranks_filter && none_below(*local_ranks_filter, local_world_size)) {
    return "--local-ranks-filter " + listed(*local_ranks_filter) +
           " matches no local rank of this node (local ranks 0-" +
           std::to_string(local_world_size - 1) + "): none of its lines reaches the console";
  }
  return std::nullopt;
}

bool Config::console_allows(int rank, int local_rank) const {
  if (ranks_filter && !ranks_filter->contains(rank)) {
    return false;
  }
  if (local_ranks_filter && !local_ranks_filter->contains(local_rank)) {
    return false;
  }
  return true;
}

const char* nproc_mode_name(NprocMode mode) {
  switch (mode) {
    case NprocMode::k_fixed:
      return "fixed";
    case NprocMode::k_auto:
      return "auto";
    case NprocMode::k_cpu:
      return "cpu";
    case NprocMode::k_gpu:
      return "gpu";
    case NprocMode::k_xpu:
      return "xpu";
  }
  return "fixed";
}

std::chrono::milliseconds millis(double seconds) {
  // Options are checked to lie in [0, k_max_seconds]; a positive value under
  // a millisecond still waits one (never a busy loop).
  const double ms = std::ceil(std::clamp(seconds, 0.0, k_max_seconds) * 1000.0);
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

namespace {

// A usage error about `keys`, naming the variables that set any of them.
[[noreturn]] void fail(const Config& c, const std::string& message,
                       std::initializer_list<const char*> keys) {
  std::string from;
  for (const char* key : keys) {
    const std::string source = c.source_of(key);
    if (source != "flag" && source != "default") {
      from += (from.empty() ? "" : ", ") + source_text(source);
    }
  }
  throw UsageError(from.empty() ? message : message + " (set by " + from + "; fix or unset it)");
}

}  // namespace

void check_host_count(const Config& c, int hosts) {
  // MIN:MAX: at least MIN hosts; those beyond MAX start as hot spares.
  const bool fits = c.elastic() ? hosts >= c.nnodes_min : hosts == c.nnodes;
  if (!fits) {
    const std::string nnodes = c.elastic()
                                   ? std::to_string(c.nnodes_min) + ":" + std::to_string(c.nnodes)
                                   : std::to_string(c.nnodes);
    throw UsageError("--nnodes " + nnodes + " does not match the " + std::to_string(hosts) +
                     " hosts listed; leave --nnodes out (the list sets it), list " +
                     (c.elastic() ? "at least MIN" : "that many") +
                     " hosts, or give MIN:MAX (hosts beyond MAX wait as hot spares)");
  }
}

void validate(const Config& c) {
  if ((!c.hosts.empty() || !c.hostfile.empty()) && c.subtree < 0) {
    if (!c.hosts.empty() && !c.hostfile.empty()) {
      throw UsageError("--hosts and --hostfile both name the hosts; give one of them");
    }
    if (c.source_of("node_rank") == "flag") {
      throw UsageError(
          "--node-rank cannot be given with --hosts/--hostfile: each host's place in the list is "
          "its node rank");
    }
    if (!c.hosts.empty() && c.source_of("nnodes") == "flag") {
      check_host_count(c, static_cast<int>(c.hosts.size()));
    }
  }
  if (c.np) {
    const bool per_node_given = c.source_of("nproc_per_node") != "default";
    if (*c.np % c.nnodes != 0) {
      fail(c,
           "-np " + std::to_string(*c.np) + " does not split evenly over --nnodes " +
               std::to_string(c.nnodes) + "; give --nproc-per-node N (N workers on each node)",
           {"np", "nnodes"});
    }
    if (per_node_given && (c.nproc_mode != NprocMode::k_fixed ||
                           static_cast<long>(c.nproc_per_node) * c.nnodes != *c.np)) {
      fail(c,
           "-np " + std::to_string(*c.np) + " disagrees with --nnodes " + std::to_string(c.nnodes) +
               " x --nproc-per-node " + std::to_string(c.nproc_per_node) + "; give one of them",
           {"np", "nnodes", "nproc_per_node"});
    }
  }
  if (c.standalone && c.nnodes != 1) {
    fail(c, "--standalone runs one node; drop --nnodes or --standalone", {"standalone", "nnodes"});
  }
  if (c.node_rank && *c.node_rank >= c.nnodes) {
    fail(c,
         "--node-rank " + std::to_string(*c.node_rank) + " is out of range for --nnodes " +
             std::to_string(c.nnodes) + "; node ranks go from 0 to " + std::to_string(c.nnodes - 1),
         {"nnodes", "node_rank"});
  }
  if (c.master_port == 0 && c.nnodes > 1) {
    fail(c,
         "--rdzv-endpoint HOST:0 (any free port) works for one node only; give the port every "
         "node will use",
         {"rdzv_endpoint", "nnodes"});
  }
  if (c.heartbeat_timeout_s <= c.heartbeat_interval_s) {
    fail(c, "--heartbeat-timeout must be longer than --heartbeat-interval",
         {"heartbeat_timeout", "heartbeat_interval"});
  }
  if (c.nproc_mode == NprocMode::k_fixed &&
      static_cast<long>(c.nnodes) * c.nproc_per_node <= c.tf_ps + (c.tf_chief ? 1 : 0) &&
      (c.tf_ps > 0 || c.tf_chief)) {
    fail(c,
         "--tf-ps " + std::to_string(c.tf_ps) + (c.tf_chief ? " and --tf-chief" : "") +
             " leave no rank to be a worker in a job of " +
             std::to_string(c.nnodes * c.nproc_per_node) +
             " ranks; run more workers or fewer parameter servers",
         {"tf_ps", "tf_chief", "nnodes", "nproc_per_node"});
  }
  if (c.python_stacks_signal && c.python_stacks_signal == c.preempt_signal) {
    fail(c,
         "--python-stacks-signal and --preempt-signal name the same signal; give the stacks "
         "another (USR1, USR2 or RTMIN+N)",
         {"python_stacks_signal", "preempt_signal"});
  }
  if (c.module && c.no_python) {
    fail(c, "-m/--module runs a Python module and cannot be combined with --no-python",
         {"module", "no_python"});
  }
  if (c.program.empty()) {
    throw UsageError("no program given; usage: ddplaunch [options] [--] program [args...]");
  }
}

}  // namespace ddplaunch
