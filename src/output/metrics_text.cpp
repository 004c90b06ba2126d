#include "output/metrics_text.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace ddplaunch {

namespace {

using json = nlohmann::json;

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

double number(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
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

void job_metrics(std::string& out, const json& job, const std::string& node) {
  const Family families[] = {
      {"ddplaunch_job_round", "gauge", "The round running: 0, then one more at each restart", ""},
      {"ddplaunch_job_restarts", "counter", "Restarts used against --max-restarts", ""},
      {"ddplaunch_job_max_restarts", "gauge", "--max-restarts", ""},
      {"ddplaunch_job_nodes", "gauge", "Nodes in the running round", ""},
      {"ddplaunch_job_world_size", "gauge", "Ranks in the running round", ""},
      {"ddplaunch_job_uptime_seconds", "gauge", "Seconds since node 0's agent started", "seconds"},
  };
  const double values[] = {number(job, "round"),        number(job, "restarts"),
                           number(job, "max_restarts"), number(job, "nnodes"),
                           number(job, "world_size"),   number(job, "elapsed_s")};
  for (size_t i = 0; i < std::size(families); ++i) {
    head(out, families[i]);
    const bool counter = std::string_view(families[i].type) == "counter";
    out +=
        fmt::format("{}{}{{{}}} {}\n", families[i].name, counter ? "_total" : "", node, values[i]);
  }
}

}  // namespace

std::string openmetrics_text(const std::string& record_json) {
  const json r = json::parse(record_json, nullptr, false);
  std::string out;
  if (!r.is_object()) {
    return "# EOF\n";
  }
  const std::string node = fmt::format("node_rank=\"{}\",host=\"{}\"", r.value("node_rank", -1),
                                       label(r.value("host", "")));
  head(out, {"ddplaunch_node", "gauge", "This node's agent: 1, with its state", ""});
  out += fmt::format("ddplaunch_node{{{},state=\"{}\"}} 1\n", node, label(r.value("state", "")));
  head(out, {"ddplaunch_node_ranks", "gauge", "This node's ranks", ""});
  out += fmt::format("ddplaunch_node_ranks{{{}}} {}\n", node, number(r, "local_ranks"));
  if (r.contains("job") && r["job"].is_object()) {
    job_metrics(out, r["job"], node);
  }
  const Family families[] = {
      {"ddplaunch_rank_state", "gauge", "1 for the rank's state (running, stopped, failed...)", ""},
      {"ddplaunch_rank_progress_events", "counter",
       "Output lines and DDPLAUNCH_PROGRESS_FD writes this round", ""},
      {"ddplaunch_rank_progress_age_seconds", "gauge", "Seconds since the rank's last progress",
       "seconds"},
      {"ddplaunch_rank_cpu_seconds", "counter", "CPU time of the rank's process tree", "seconds"},
      {"ddplaunch_rank_memory_bytes", "gauge", "Resident memory of the rank's process tree",
       "bytes"},
      {"ddplaunch_rank_gpu_memory_bytes", "gauge",
       "GPU memory of the rank's process tree (where NVML is present)", "bytes"},
  };
  const json ranks = r.value("ranks", json::array());
  for (const Family& f : families) {
    head(out, f);
    const bool counter = std::string_view(f.type) == "counter";
    for (const auto& k : ranks) {
      const std::string labels = fmt::format("{},rank=\"{}\",local_rank=\"{}\"", node,
                                             k.value("rank", -1), k.value("local_rank", -1));
      const std::string_view name = f.name;
      double v = 0;
      std::string extra;
      if (name == "ddplaunch_rank_state") {
        extra = fmt::format(",state=\"{}\"", label(k.value("state", "")));
        v = 1;
      } else if (name == "ddplaunch_rank_progress_events") {
        v = number(k, "progress_events");
      } else if (name == "ddplaunch_rank_progress_age_seconds") {
        if (!k.contains("since_progress_s") || !k["since_progress_s"].is_number()) {
          continue;  // it ended
        }
        v = number(k, "since_progress_s");
      } else if (name == "ddplaunch_rank_cpu_seconds") {
        v = number(k, "cpu_s");
      } else if (name == "ddplaunch_rank_memory_bytes") {
        v = number(k, "rss_kib") * 1024;
      } else {
        if (!k.contains("gpu_memory_bytes") || !k["gpu_memory_bytes"].is_number()) {
          continue;  // no NVML here
        }
        v = number(k, "gpu_memory_bytes");
      }
      out += fmt::format("{}{}{{{}{}}} {}\n", f.name, counter ? "_total" : "", labels, extra, v);
    }
  }
  out += "# EOF\n";
  return out;
}

}  // namespace ddplaunch
