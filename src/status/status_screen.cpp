#include "status/status_screen.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ddplaunch {

namespace {

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

std::string mib(std::optional<double> kib) {
  return kib ? fmt::format("{:.0f}M", *kib / 1024) : "-";
}

std::string secs(std::optional<double> s) {
  if (!s) {
    return "-";
  }
  return *s < 600 ? fmt::format("{:.1f}s", *s) : fmt::format("{:.0f}m", *s / 60);
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

std::string job_line(const std::optional<JobStatus>& j) {
  if (!j) {
    return "job: node 0 did not answer\n";
  }
  return fmt::format(
      "job {}  round {}  restarts {}/{}  nodes {} (expected {})  world size {}  up {}\n", j->run_id,
      j->round, j->restarts, j->max_restarts, j->nnodes, j->nnodes_expected, j->world_size,
      secs(j->elapsed_s));
}

std::string node_row(const NodeStatus& n) {
  const bool agent = n.agent_pid.has_value();
  std::string row = fmt::format("{:>5} {:<16} {:<15} {:<9} {:>8} {:>7} {:>7}", n.node_rank, n.host,
                                n.addr, n.state, agent ? std::to_string(*n.agent_pid) : "-",
                                agent ? secs(n.agent_cpu_s) : "-",
                                agent ? mib(static_cast<double>(n.agent_rss_kib)) : "-");
  if (n.state == "lost") {
    row += fmt::format("  in round {}", n.round);
  }
  return row;
}

}  // namespace

std::string format_status(const StatusDocument& doc, int width) {
  std::string out = job_line(doc.job);
  out += cut(fmt::format("{:>5} {:<16} {:<15} {:<9} {:>8} {:>7} {:>7}", "NODE", "HOST", "ADDRESS",
                         "STATE", "AGENT", "CPU", "RSS"),
             width) +
         "\n";
  for (const NodeStatus& n : doc.nodes) {
    out += cut(node_row(n), width) + "\n";
  }
  for (const int m : doc.missing) {
    out += fmt::format("{:>5} did not answer in time (lost, stopped or unreachable)\n", m);
  }
  // A GPU column where NVML gave the ranks' GPU memory.
  const bool gpu = std::any_of(doc.ranks.begin(), doc.ranks.end(),
                               [](const RankStatus& r) { return r.gpu_memory_bytes.has_value(); });
  const std::string head =
      fmt::format("{:>5} {:>4} {:>8} {:<9} {:>7} {:>9} {:>7} {:>5} {:>7}  ", "RANK", "NODE", "PID",
                  "STATE", "RUN", "PROGRESS", "AGE", "CPU%", "RSS") +
      (gpu ? fmt::format("{:>7}  ", "GPU") : "");
  out += cut(head + "LAST LINE", width) + "\n";
  for (const RankStatus& r : doc.ranks) {
    const std::string row =
        fmt::format("{:>5} {:>4} {:>8} {:<9} {:>7} {:>9} {:>7} {:>5.0f} {:>7}  ", r.rank,
                    r.node_rank, r.pid, r.state, secs(r.run_s), r.progress_events,
                    secs(r.since_progress_s), r.cpu_percent, mib(static_cast<double>(r.rss_kib)));
    const std::string gpu_cell =
        !gpu ? ""
             : fmt::format("{:>7}  ",
                           mib(r.gpu_memory_bytes
                                   ? std::optional(static_cast<double>(*r.gpu_memory_bytes) / 1024)
                                   : std::nullopt));
    out += cut(row + gpu_cell + r.last_line, width) + "\n";
  }
  return out;
}

std::string format_stacks(const StacksDocument& doc) {
  std::vector<const RankStacks*> ranks;
  for (const RankStacks& r : doc.ranks) {
    ranks.push_back(&r);
  }
  std::stable_sort(ranks.begin(), ranks.end(),
                   [](const RankStacks* a, const RankStacks* b) { return a->rank < b->rank; });
  std::map<int, std::string> hosts;
  for (const NodeStacks& n : doc.nodes) {
    hosts[n.node_rank] = n.host;
  }
  std::string out;
  for (const RankStacks* r : ranks) {
    out += printable(fmt::format("=== rank {} (node {}, {}, pid {})", r->rank, r->node_rank,
                                 hosts[r->node_rank], r->pid));
    if (!r->ended.empty()) {
      out += printable(": " + r->ended + "\n");
      continue;
    }
    out += " ===\n";
    if (r->processes.empty()) {
      out += "(no process left to look at)\n";
    }
    for (const ProcessStacks& p : r->processes) {
      out += printable(
          fmt::format("--- pid {} {} ({})\n", p.pid, p.exe, p.tool.empty() ? "none" : p.tool));
      std::string stacks = printable(p.stacks);
      if (!stacks.empty() && stacks.back() != '\n') {
        stacks += '\n';
      }
      out += stacks;
      if (!p.note.empty()) {
        out += printable("note: " + p.note + "\n");
      }
    }
  }
  for (const int m : doc.missing) {
    out += fmt::format("node {} did not answer in time (lost, stopped or unreachable)\n", m);
  }
  if (ranks.empty() && doc.missing.empty()) {
    out += "no rank to show: the job runs none here yet, or --ranks/--nodes chose none\n";
  }
  return out;
}

}  // namespace ddplaunch
