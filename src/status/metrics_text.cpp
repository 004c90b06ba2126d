#include "status/metrics_text.hpp"

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string_view>

namespace ddplaunch {

namespace {

// A label value, escaped as the format asks (\\, \", \n).
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

struct Family {
  const char* name;
  const char* type;  // gauge, counter, info
  const char* help;
  const char* unit;  // "" or seconds, bytes
};

void head(std::string& out, const Family& f) {
  out += fmt::format("# TYPE {} {}\n", f.name, f.type);
  if (f.unit[0] != 0) {
    out += fmt::format("# UNIT {} {}\n", f.name, f.unit);
  }
  out += fmt::format("# HELP {} {}\n", f.name, f.help);
}

bool is_counter(const Family& f) {
  return std::string_view(f.type) == "counter";
}

void job_metrics(std::string& out, const JobStatus& job, const std::string& node) {
  const std::pair<Family, double> families[] = {
      {{"ddplaunch_job_round", "gauge", "The round running: 0, then one more at each restart", ""},
       static_cast<double>(job.round)},
      {{"ddplaunch_job_restarts", "counter", "Restarts used against --max-restarts", ""},
       static_cast<double>(job.restarts)},
      {{"ddplaunch_job_max_restarts", "gauge", "--max-restarts", ""},
       static_cast<double>(job.max_restarts)},
      {{"ddplaunch_job_nodes", "gauge", "Nodes in the running round", ""},
       static_cast<double>(job.nnodes)},
      {{"ddplaunch_job_world_size", "gauge", "Ranks in the running round", ""},
       static_cast<double>(job.world_size)},
      {{"ddplaunch_job_uptime_seconds", "gauge", "Seconds since node 0's agent started", "seconds"},
       job.elapsed_s},
  };
  for (const auto& [f, value] : families) {
    head(out, f);
    out += fmt::format("{}{}{{{}}} {}\n", f.name, is_counter(f) ? "_total" : "", node, value);
  }
}

// A rank's metric: its value, or nullopt where it has none (an ended
// rank's progress age, GPU memory without NVML).
struct RankFamily {
  Family family;
  std::function<std::optional<double>(const RankStatus&)> value;
};

const RankFamily k_rank_families[] = {
    {{"ddplaunch_rank_state", "gauge", "1 for the rank's state (running, stopped, failed...)", ""},
     [](const RankStatus&) { return std::optional(1.0); }},
    {{"ddplaunch_rank_progress_events", "counter",
      "Output lines and DDPLAUNCH_PROGRESS_FD writes this round", ""},
     [](const RankStatus& r) { return std::optional(static_cast<double>(r.progress_events)); }},
    {{"ddplaunch_rank_progress_age_seconds", "gauge", "Seconds since the rank's last progress",
      "seconds"},
     [](const RankStatus& r) { return r.since_progress_s; }},
    {{"ddplaunch_rank_cpu_seconds", "counter", "CPU time of the rank's process tree", "seconds"},
     [](const RankStatus& r) { return std::optional(r.cpu_s); }},
    {{"ddplaunch_rank_memory_bytes", "gauge", "Resident memory of the rank's process tree",
      "bytes"},
     [](const RankStatus& r) { return std::optional(static_cast<double>(r.rss_kib) * 1024); }},
    {{"ddplaunch_rank_gpu_memory_bytes", "gauge",
      "GPU memory of the rank's process tree (where NVML is present)", "bytes"},
     [](const RankStatus& r) {
       return r.gpu_memory_bytes ? std::optional(static_cast<double>(*r.gpu_memory_bytes))
                                 : std::nullopt;
     }},
};

}  // namespace

std::string openmetrics_text(const NodeStatus& n) {
  std::string out;
  const std::string node = fmt::format("node_rank=\"{}\",host=\"{}\"", n.node_rank, label(n.host));
  head(out, {"ddplaunch_node", "gauge", "This node's agent: 1, with its state", ""});
  out += fmt::format("ddplaunch_node{{{},state=\"{}\"}} 1\n", node, label(n.state));
  head(out, {"ddplaunch_node_ranks", "gauge", "This node's ranks", ""});
  out += fmt::format("ddplaunch_node_ranks{{{}}} {}\n", node, n.local_ranks);
  if (n.job) {
    job_metrics(out, *n.job, node);
  }
  for (const RankFamily& f : k_rank_families) {
    head(out, f.family);
    for (const RankStatus& r : n.ranks) {
      const auto v = f.value(r);
      if (!v) {
        continue;
      }
      const std::string extra = std::string_view(f.family.name) == "ddplaunch_rank_state"
                                    ? fmt::format(",state=\"{}\"", label(r.state))
                                    : std::string();
      out +=
          fmt::format("{}{}{{{},rank=\"{}\",local_rank=\"{}\"{}}} {}\n", f.family.name,
                      is_counter(f.family) ? "_total" : "", node, r.rank, r.local_rank, extra, *v);
    }
  }
  out += "# EOF\n";
  return out;
}

}  // namespace ddplaunch
