#include "ddplaunch/summary.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace ddplaunch {

namespace {

std::string ending(const RankOutcome& o) {
  if (!o.exit) {
    return "did not report an end (its node was lost)";
  }
  std::string text = o.exit->by_signal() ? "killed by " + o.exit->describe()
                                         : "exited with " + o.exit->describe();
  if (o.stopped_by_launcher) {
    text += " after ddplaunch stopped it";
  }
  return text;
}

const char* reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::k_none: return "none";
    case StopReason::k_worker_failed: return "worker_failed";
    case StopReason::k_signal: return "signal";
    case StopReason::k_remote: return "remote";
  }
  return "none";
}

}  // namespace

std::string describe_outcome(const RankOutcome& o) {
  return fmt::format("rank {} (node {}, local rank {}, host {}, pid {}): {}", o.rank, o.node_rank,
                     o.local_rank, o.host, o.pid, ending(o));
}

std::string format_failure_report(const JobSummary& s) {
  if (s.exit_code == 0 && s.reason == StopReason::k_none) {
    return {};
  }
  std::string out;
  if (s.root_cause) {
    const auto& r = *s.root_cause;
    out += fmt::format(
        "ddplaunch: job failed: rank {} (node {}, local rank {}, host {}, pid {}) {}, "
        "{:.2f} s after the start\n",
        r.rank, r.node_rank, r.local_rank, r.host, r.pid, ending(r),
        r.end_time > 0 ? r.end_time - s.start_time : s.end_time - s.start_time);
    if (!r.last_stderr.empty()) {
      out += fmt::format("ddplaunch: last lines of rank {}'s stderr:\n", r.rank);
      for (const auto& line : r.last_stderr) {
        out += "  | " + line + "\n";
      }
    } else {
      out += fmt::format("ddplaunch: rank {} wrote nothing to stderr\n", r.rank);
    }
  } else if (s.reason == StopReason::k_signal && s.stop_signal) {
    out += fmt::format("ddplaunch: job stopped: ddplaunch received {}\n",
                       signal_name(*s.stop_signal));
  } else if (!s.remote_message.empty()) {
    out += "ddplaunch: job failed: " + s.remote_message + "\n";
  }
  for (const auto& o : s.ranks) {
    if (s.root_cause && o.rank == s.root_cause->rank) {
      continue;
    }
    out += "ddplaunch:   " + describe_outcome(o) + "\n";
  }
  out += fmt::format("ddplaunch: exit code {}\n", s.exit_code);
  return out;
}

std::string summary_to_json(const JobSummary& s) {
  using nlohmann::json;
  auto rank_json = [](const RankOutcome& o) {
    json j = {{"rank", o.rank},
              {"local_rank", o.local_rank},
              {"node_rank", o.node_rank},
              {"host", o.host},
              {"pid", o.pid},
              {"stopped_by_launcher", o.stopped_by_launcher},
              {"start_time", o.start_time},
              {"end_time", o.end_time}};
    if (!o.exit) {
      j["state"] = "unknown";
      j["exit_code"] = nullptr;
      j["signal"] = nullptr;
    } else if (o.exit->by_signal()) {
      j["state"] = "signaled";
      j["exit_code"] = nullptr;
      j["signal"] = o.exit->signal();
      j["signal_name"] = signal_name(o.exit->signal());
    } else {
      j["state"] = o.exit->success() ? "succeeded" : "failed";
      j["exit_code"] = o.exit->code();
      j["signal"] = nullptr;
    }
    if (!o.last_stderr.empty()) {
      j["last_stderr"] = o.last_stderr;
    }
    return j;
  };
  json doc = {{"run_id", s.run_id},
              {"exit_code", s.exit_code},
              {"stop_reason", reason_name(s.reason)},
              {"start_time", s.start_time},
              {"end_time", s.end_time},
              {"launcher_max_rss_kib", s.launcher_max_rss_kib}};
  doc["stop_signal"] = s.stop_signal ? json(signal_name(*s.stop_signal)) : json(nullptr);
  doc["root_cause"] = s.root_cause ? rank_json(*s.root_cause) : json(nullptr);
  if (!s.remote_message.empty()) {
    doc["message"] = s.remote_message;
  }
  json ranks = json::array();
  for (const auto& o : s.ranks) {
    ranks.push_back(rank_json(o));
  }
  doc["ranks"] = std::move(ranks);
  return doc.dump(2) + "\n";
}

}  // namespace ddplaunch
