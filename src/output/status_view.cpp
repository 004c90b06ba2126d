#include "output/status_view.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

namespace ddplaunch {

namespace {

using json = nlohmann::json;

std::string mib(const json& kib) {
  return kib.is_number() ? fmt::format("{:.0f}M", kib.get<double>() / 1024) : "-";
}

std::string secs(const json& s) {
  if (!s.is_number()) {
    return "-";
  }
  const double v = s.get<double>();
  return v < 600 ? fmt::format("{:.1f}s", v) : fmt::format("{:.0f}m", v / 60);
}

// `line` cut to `width` bytes, a UTF-8 character kept whole.
std::string cut(std::string line, int width) {
  if (width > 0 && line.size() > static_cast<size_t>(width)) {
    size_t keep = static_cast<size_t>(width);
    while (keep > 0 && (static_cast<unsigned char>(line[keep]) >> 6) == 2) {
      --keep;
    }
    line.resize(keep);
  }
  return line;
}

std::string job_line(const json& doc) {
  const json j = doc.value("job", json());
  if (!j.is_object()) {
    return "job: node 0 did not answer\n";
  }
  return fmt::format(
      "job {}  round {}  restarts {}/{}  nodes {} (expected {})  world size {}  up {}\n",
      j.value("run_id", ""), j.value("round", 0), j.value("restarts", 0),
      j.value("max_restarts", 0), j.value("nnodes", 0), j.value("nnodes_expected", ""),
      j.value("world_size", 0), secs(j.value("elapsed_s", json())));
}

// The screen of a parsed document; throws json::exception for a field of the
// wrong type.
std::string format_document(const json& doc, int width) {
  std::string out = job_line(doc);
  out += cut(fmt::format("{:>5} {:<16} {:<15} {:<9} {:>8} {:>7} {:>7}", "NODE", "HOST", "ADDRESS",
                         "STATE", "AGENT", "CPU", "RSS"),
             width) +
         "\n";
  for (const auto& n : doc["nodes"]) {
    const json pid = n.value("agent_pid", json());
    std::string row =
        fmt::format("{:>5} {:<16} {:<15} {:<9} {:>8} {:>7} {:>7}", n.value("node_rank", -1),
                    n.value("host", ""), n.value("addr", ""), n.value("state", ""),
                    pid.is_number_integer() ? std::to_string(pid.get<long long>()) : "-",
                    secs(n.value("agent_cpu_s", json())), mib(n.value("agent_rss_kib", json())));
    if (n.value("state", "") == "lost") {
      row += fmt::format("  in round {}", n.value("round", 0));
    }
    out += cut(row, width) + "\n";
  }
  for (const auto& m : doc["missing"]) {
    out +=
        fmt::format("{:>5} did not answer in time (lost, stopped or unreachable)\n", m.get<int>());
  }
  // A GPU column where NVML gave the ranks' GPU memory.
  bool gpu = false;
  for (const auto& r : doc["ranks"]) {
    gpu = gpu || (r.is_object() && r.contains("gpu_memory_bytes"));
  }
  const std::string head =
      fmt::format("{:>5} {:>4} {:>8} {:<9} {:>7} {:>9} {:>7} {:>5} {:>7}  ", "RANK", "NODE", "PID",
                  "STATE", "RUN", "PROGRESS", "AGE", "CPU%", "RSS") +
      (gpu ? fmt::format("{:>7}  ", "GPU") : "");
  out += cut(head + "LAST LINE", width) + "\n";
  for (const auto& r : doc["ranks"]) {
    const std::string row =
        fmt::format("{:>5} {:>4} {:>8} {:<9} {:>7} {:>9} {:>7} {:>5.0f} {:>7}  ",
                    r.value("rank", -1), r.value("node_rank", -1), r.value("pid", 0),
                    r.value("state", ""), secs(r.value("run_s", json())),
                    r.value("progress_events", 0LL), secs(r.value("since_progress_s", json())),
                    r.value("cpu_percent", 0.0), mib(r.value("rss_kib", json())));
    const json gpu_bytes = r.value("gpu_memory_bytes", json());
    const std::string gpu_cell =
        !gpu ? ""
             : fmt::format(
                   "{:>7}  ",
                   mib(gpu_bytes.is_number() ? json(gpu_bytes.get<double>() / 1024) : json()));
    out += cut(row + gpu_cell + r.value("last_line", ""), width) + "\n";
  }
  return out;
}

// `text` with every control character but newline and tab as '?'.
std::string printable(std::string text) {
  for (char& c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      c = '?';
    }
  }
  return text;
}

std::string stacks_text(const json& doc) {
  std::vector<json> ranks(doc["ranks"].begin(), doc["ranks"].end());
  std::stable_sort(ranks.begin(), ranks.end(), [](const json& a, const json& b) {
    return a.value("rank", -1) < b.value("rank", -1);
  });
  std::map<int, std::string> hosts;
  for (const auto& n : doc["nodes"]) {
    hosts[n.value("node_rank", -1)] = n.value("host", "");
  }
  std::string out;
  for (const auto& r : ranks) {
    const int node = r.value("node_rank", -1);
    out += printable(fmt::format("=== rank {} (node {}, {}, pid {})", r.value("rank", -1), node,
                                 hosts[node], r.value("pid", 0)));
    if (const std::string ended = r.value("ended", ""); !ended.empty()) {
      out += printable(": " + ended + "\n");
      continue;
    }
    out += " ===\n";
    const json processes = r.value("processes", json::array());
    if (!processes.is_array() || processes.empty()) {
      out += "(no process left to look at)\n";
    }
    for (const auto& p : processes) {
      out += printable(fmt::format("--- pid {} {} ({})\n", p.value("pid", 0), p.value("exe", ""),
                                   p.value("tool", "none")));
      std::string stacks = printable(p.value("stacks", ""));
      if (!stacks.empty() && stacks.back() != '\n') {
        stacks += '\n';
      }
      out += stacks;
      if (const std::string note = p.value("note", ""); !note.empty()) {
        out += printable("note: " + note + "\n");
      }
    }
  }
  for (const auto& m : doc["missing"]) {
    out += fmt::format("node {} did not answer in time (lost, stopped or unreachable)\n",
                       m.get<int>());
  }
  if (ranks.empty() && doc["missing"].empty()) {
    out += "no rank to show: the job runs none here yet, or --ranks/--nodes chose none\n";
  }
  return out;
}

}  // namespace

std::string format_stacks(const std::string& text) {
  const json doc = json::parse(text, nullptr, false);
  if (!doc.is_object()) {
    return "stacks: no answer could be read\n";
  }
  try {
    return stacks_text(doc);
  } catch (const json::exception&) {
    return "stacks: an answer held a field of the wrong type\n";
  }
}

std::string status_document(int64_t n, const std::vector<int>& asked,
                            const std::vector<std::optional<std::string>>& answers,
                            const std::optional<std::set<int>>& only) {
  json doc = {{"request", n},
              {"job", nullptr},
              {"nodes", json::array()},
              {"ranks", json::array()},
              {"missing", json::array()}};
  // An answer is whatever was written under its key (the workers'
  // credential may write there too): anything but the shapes expected is
  // left out, never trusted.
  for (size_t k = 0; k < asked.size() && k < answers.size(); ++k) {
    const int r = asked[k];
    json answer = answers[k] ? json::parse(*answers[k], nullptr, false) : json();
    if (!answer.is_object()) {
      doc["missing"].push_back(r);
      continue;
    }
    if (const auto job = answer.find("job"); job != answer.end() && job->is_object()) {
      doc["job"] = *job;
    }
    if (only && !only->contains(r)) {
      continue;  // node 0, asked for the job's size only
    }
    if (const auto ranks = answer.find("ranks"); ranks != answer.end() && ranks->is_array()) {
      for (auto rank : *ranks) {
        if (rank.is_object()) {
          rank["node_rank"] = r;
          doc["ranks"].push_back(std::move(rank));
        }
      }
    }
    answer.erase("ranks");
    answer.erase("job");
    doc["nodes"].push_back(std::move(answer));
  }
  // The nodes the job lost (node 0's list), as nodes in the "lost" state:
  // the rank they had in the round they were lost in.
  const json& job = doc["job"];
  const auto lost = job.is_object() ? job.find("lost_nodes") : job.end();
  for (size_t i = 0; lost != job.end() && lost->is_array() && i < lost->size() && i < 1024; ++i) {
    const json& l = (*lost)[i];
    const auto rank = l.is_object() ? l.find("node_rank") : l.end();
    if (rank == l.end() || !rank->is_number_integer() ||
        (only && !only->contains(rank->get<int>()))) {
      continue;
    }
    json node = {{"node_rank", *rank}, {"state", "lost"}};
    for (const char* field : {"host", "addr", "round"}) {
      if (const auto f = l.find(field); f != l.end() && (f->is_string() || f->is_number())) {
        node[field] = *f;
      }
    }
    doc["nodes"].push_back(std::move(node));
  }
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string format_status(const std::string& text, int width) {
  const json doc = json::parse(text, nullptr, false);
  if (!doc.is_object()) {
    return "status: no answer could be read\n";
  }
  try {
    return format_document(doc, width);
  } catch (const json::exception&) {
    // A field of the wrong type (an answer written by hand): what can be
    // shown is not worth a crash.
    return job_line(json::object()) + "status: an answer held a field of the wrong type\n";
  }
}

}  // namespace ddplaunch
