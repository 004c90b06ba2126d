#include "supervise/summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "ddplaunch/error.hpp"
#include "supervise/hang_stacks.hpp"

namespace ddplaunch {

namespace {

std::string ending(const RankOutcome& o) {
  if (!o.exit) {
    return "did not report an end (its node was lost or stopped first)";
  }
  std::string text =
      o.exit->by_signal() ? "killed by " + o.exit->describe() : "exited with " + o.exit->describe();
  if (o.hung_for_s > 0) {
    return fmt::format(
        "hung: no progress for {:.1f} s; ddplaunch asked it for its stacks (SIGABRT) and it "
        "ended, {}",
        o.hung_for_s, text);
  }
  if (o.preempted) {
    return "preempted: exited with exit code 0 after the preemption signal";
  }
  if (o.stopped_by_launcher) {
    text += " after ddplaunch stopped it";
  }
  return text;
}

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::k_none:
      return "none";
    case StopReason::k_worker_failed:
      return "worker_failed";
    case StopReason::k_signal:
      return "signal";
    case StopReason::k_remote:
      return "remote";
    case StopReason::k_preempted:
      return "preempted";
  }
  return "none";
}

std::string describe_outcome(const RankOutcome& o) {
  return fmt::format("rank {} (node {}, local rank {}, host {}, pid {}): {}", o.rank, o.node_rank,
                     o.local_rank, o.host, o.pid, ending(o));
}

std::vector<std::string> fold_tail(const std::vector<std::string>& lines) {
  const size_t first = lines.size() > k_fold_lines ? lines.size() - k_fold_lines : 0;
  std::vector<std::string> tail(lines.begin() + static_cast<std::ptrdiff_t>(first), lines.end());
  for (auto& line : tail) {
    if (line.size() > k_fold_line_bytes) {
      size_t cut = k_fold_line_bytes;
      while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) {
        --cut;  // not inside a UTF-8 character
      }
      line.resize(cut);
    }
  }
  return tail;
}

bool failed_by_itself(const RankOutcome& o) {
  return o.exit && !o.exit->success() && !o.preempted && o.hung_for_s == 0 &&
         !(o.stopped_by_launcher && o.exit->by_signal());
}

void keep_fold_tails(std::vector<RankOutcome>& ranks) {
  size_t bytes = 0;
  for (auto& o : ranks) {
    std::vector<std::string> tail;
    if (failed_by_itself(o)) {
      tail = fold_tail(o.last_stderr);
    }
    for (const auto& line : tail) {
      bytes += line.size();
    }
    o.last_stderr = bytes <= k_fold_node_bytes ? std::move(tail) : std::vector<std::string>();
  }
}

std::string HealthCheckResult::describe() const {
  std::string text = "'" + command + "' " + status;
  if (!output.empty()) {
    text += ": " + output.back();
  }
  return text;
}

std::string describe_round_end(const RoundSummary& r) {
  if (r.root_cause) {
    return fmt::format("rank {} (node {}, host {}) {}", r.root_cause->rank, r.root_cause->node_rank,
                       r.root_cause->host, ending(*r.root_cause));
  }
  return r.message.empty() ? fmt::format("exit code {}", r.exit_code) : r.message;
}

namespace {

constexpr std::string_view k_python_traceback = "Traceback (most recent call last):";

// The last lines of a traceback, each as "  | line".
void append_traceback(std::string& out, const std::string& traceback) {
  constexpr size_t k_lines = 30;
  std::vector<std::string_view> lines;
  std::string_view rest = traceback;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  const size_t first = lines.size() > k_lines ? lines.size() - k_lines : 0;
  for (size_t i = first; i < lines.size(); ++i) {
    out += "  | ";
    out += lines[i];
    out += "\n";
  }
}

}  // namespace

namespace {

bool no_progress(const RoundSummary& r) {
  return r.made_progress == false;  // --restart-min-progress: no restart used
}

std::string progress_events(const RoundSummary& r) {
  return r.progress_events < 0
             ? std::string()
             : fmt::format(" ({} progress events on this node)", r.progress_events);
}

void append_spares(std::string& out, const RoundSummary& r) {
  for (const auto& x : r.replaced) {
    out += fmt::format("ddplaunch: round {} began with spare {} in the place of node {} ({})\n",
                       r.round, x.spare, x.node_rank, x.lost);
  }
}

// How each round before the last ended and what it used; the last round's
// spares; the rounds in a row that ended without progress.
void append_rounds(std::string& out, const JobSummary& s) {
  int used = s.restarts;
  for (size_t i = 0; i + 1 < s.rounds.size(); ++i) {
    used -= s.rounds[i].regroup || no_progress(s.rounds[i]) ? 0 : 1;
  }
  for (size_t i = 0; i + 1 < s.rounds.size(); ++i) {
    const auto& r = s.rounds[i];
    append_spares(out, r);
    if (r.regroup) {
      out += fmt::format("ddplaunch: round {} ended: {}; the nodes met again (no restart used)\n",
                         r.round, describe_round_end(r));
    } else if (no_progress(r)) {
      out += fmt::format(
          "ddplaunch: round {} failed without progress{}: {}; restarted (no restart used)\n",
          r.round, progress_events(r), describe_round_end(r));
    } else {
      out += fmt::format("ddplaunch: round {} failed{}: {}; restarted ({} of {})\n", r.round,
                         progress_events(r), describe_round_end(r), ++used, s.max_restarts);
    }
  }
  if (!s.rounds.empty()) {
    append_spares(out, s.rounds.back());
  }
  size_t stalled = 0;  // the last rounds, in a row, without progress
  while (stalled < s.rounds.size() && no_progress(s.rounds[s.rounds.size() - 1 - stalled])) {
    ++stalled;
  }
  if (stalled > 0 && s.root_cause) {
    out += fmt::format(
        "ddplaunch: {} round{} in a row failed without progress{}: the job ends rather than "
        "repeat the same failure (--max-no-progress-restarts){}\n",
        stalled, stalled == 1 ? "" : "s", progress_events(s.rounds.back()),
        s.exit_code == k_exit_no_requeue
            ? fmt::format("; exit code {}: retrying cannot help, do not requeue", k_exit_no_requeue)
            : std::string());
  }
}

// The lines of `tail` besides the traceback Python printed for `error`: the
// block from its "Traceback (most recent call last):" (or the tail's start)
// to the line that repeats the error's message, and any other line the
// error file's traceback holds.
std::vector<const std::string*> beside_traceback(const std::vector<std::string>& tail,
                                                 const WorkerError& error) {
  auto trimmed = [](const std::string& line) {
    const auto start = line.find_first_not_of(" \t");
    return start == std::string::npos ? std::string_view() : std::string_view(line).substr(start);
  };
  auto in_error = [&](const std::string& line) {
    const std::string_view t = trimmed(line);
    return t.empty() || error.traceback.find(t) != std::string::npos ||
           error.message.find(t) != std::string::npos;
  };
  size_t block_begin = tail.size(), block_end = tail.size();  // [begin, end)
  for (size_t i = tail.size(); i-- > 0;) {
    if (!error.message.empty() && trimmed(tail[i]) == error.message) {
      block_end = i + 1;
      block_begin = i;
      while (block_begin > 0 && trimmed(tail[block_begin - 1]) != k_python_traceback &&
             (tail[block_begin - 1].starts_with(" ") || in_error(tail[block_begin - 1]))) {
        --block_begin;
      }
      if (block_begin > 0 && trimmed(tail[block_begin - 1]) == k_python_traceback) {
        --block_begin;
      }
      break;
    }
  }
  std::vector<const std::string*> more;
  for (size_t i = 0; i < tail.size(); ++i) {
    if ((i < block_begin || i >= block_end) && !in_error(tail[i])) {
      more.push_back(&tail[i]);
    }
  }
  return more;
}

std::vector<const std::string*> every_line(const std::vector<std::string>& tail) {
  std::vector<const std::string*> out;
  for (const auto& line : tail) {
    out.push_back(&line);
  }
  return out;
}

// The rank that failed first: how it ended, what it raised, its stderr's
// tail, the job's message and the hung ranks' stacks.
void append_root_cause(std::string& out, const JobSummary& s) {
  const auto& r = *s.root_cause;
  out += fmt::format(
      "ddplaunch: job failed: rank {} (node {}, local rank {}, host {}, pid {}) {}, "
      "{:.2f} s after the start\n",
      r.rank, r.node_rank, r.local_rank, r.host, r.pid, ending(r),
      r.end_time > 0 ? r.end_time - s.start_time : s.end_time - s.start_time);
  if (r.error) {
    out += fmt::format("ddplaunch: rank {} raised {}\n", r.rank, r.error->message);
    append_traceback(out, r.error->traceback);
  }
  // An @record error file's traceback is what the rank printed last: of its
  // stderr's tail, only the lines that say more are shown (the traceback
  // once, above).
  const std::vector<const std::string*> more =
      r.error ? beside_traceback(r.last_stderr, *r.error) : every_line(r.last_stderr);
  if (r.last_stderr.empty()) {
    out += fmt::format("ddplaunch: rank {} wrote nothing to stderr\n", r.rank);
  } else if (more.empty()) {
    out += fmt::format("ddplaunch: (rank {}'s stderr ends with that traceback)\n", r.rank);
  } else {
    out += fmt::format("ddplaunch: last lines of rank {}'s stderr{}:\n", r.rank,
                       more.size() < r.last_stderr.size() ? ", beside that traceback" : "");
    for (const auto* line : more) {
      out += "  | " + *line + "\n";
    }
  }
  if (!s.message.empty()) {
    out += "ddplaunch: " + s.message + "\n";
  }
  if (const std::string stacks = format_hung_stacks(s.ranks); !stacks.empty()) {
    out +=
        "ddplaunch: the stacks of the ranks without progress (innermost call first; a stack "
        "no other rank shares comes first):\n" +
        stacks;
  }
}

// At most this many ranks that ended alike without lines of their own are
// listed one by one in the report.
constexpr size_t k_listed_alike = 8;

// Ranks that ended alike: the same ending and the same last lines.
struct Alike {
  std::string ending;
  std::vector<std::string> tail;
  std::vector<const RankOutcome*> ranks;
};

// The ranks' group headline: one rank as describe_outcome() says it, several
// as "ranks 0-31,48 (nodes 0-3): exited with exit code 1".
std::string headline(const Alike& g) {
  if (g.ranks.size() == 1) {
    return describe_outcome(*g.ranks.front());
  }
  std::vector<int> ranks;
  std::vector<int> nodes;
  for (const RankOutcome* o : g.ranks) {
    ranks.push_back(o->rank);
    if (nodes.empty() || nodes.back() != o->node_rank) {
      nodes.push_back(o->node_rank);
    }
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  const std::string where = nodes.size() == 1
                                ? fmt::format("node {}, host {}", nodes[0], g.ranks[0]->host)
                                : "nodes " + rank_list(nodes);
  return fmt::format("ranks {} ({}): {}", rank_list(ranks), where, g.ending);
}

// Every rank but the root cause: those that failed alike with the same last
// lines in one line, and the lines once (as PRRTE folds the same message
// from many ranks); more than k_listed_alike ranks that ended alike without
// lines of their own (stopped by ddplaunch, succeeded) in one line too,
// fewer each with its pid and host.
void append_other_ranks(std::string& out, const JobSummary& s) {
  std::vector<Alike> groups;
  std::map<std::pair<std::string, std::vector<std::string>>, size_t> index;
  for (const auto& o : s.ranks) {
    if (s.root_cause && o.rank == s.root_cause->rank) {
      continue;
    }
    auto key = std::make_pair(ending(o), o.last_stderr);
    auto [it, added] = index.emplace(key, groups.size());
    if (added) {
      groups.push_back(Alike{std::move(key.first), std::move(key.second), {}});
    }
    groups[it->second].ranks.push_back(&o);
  }
  const std::vector<std::string> root_tail =
      s.root_cause ? fold_tail(s.root_cause->last_stderr) : std::vector<std::string>();
  for (const auto& g : groups) {
    if (g.tail.empty() && g.ranks.size() <= k_listed_alike) {
      for (const RankOutcome* o : g.ranks) {
        out += "ddplaunch:   " + describe_outcome(*o) + "\n";
      }
      continue;
    }
    out += "ddplaunch:   " + headline(g) + "\n";
    if (g.tail.empty()) {
      continue;
    }
    if (g.tail == root_tail) {
      out += fmt::format("ddplaunch:     {} last lines: the same as rank {}'s\n",
                         g.ranks.size() == 1 ? "its" : "their", s.root_cause->rank);
      continue;
    }
    for (const auto& line : g.tail) {
      out += "    | " + line + "\n";
    }
  }
}

// A job that no rank's failure ended: preempted, stopped by a signal, or
// ended for the reason its message gives.
void append_stop(std::string& out, const JobSummary& s) {
  if (s.reason == StopReason::k_preempted) {
    out += "ddplaunch: job preempted: " +
           (s.message.empty() ? std::string("--preempt-signal") : s.message) +
           "; every rank was told to checkpoint and exit (exit 75: requeue it)\n";
  } else if (s.reason == StopReason::k_signal && s.stop_signal && s.message.empty()) {
    out +=
        fmt::format("ddplaunch: job stopped: ddplaunch received {}\n", signal_name(*s.stop_signal));
  } else if (!s.message.empty()) {
    // A stop signal on any node "stopped" the job; anything else made it fail.
    const bool stopped = s.reason == StopReason::k_signal || s.exit_code > 128;
    out += std::string(stopped ? "ddplaunch: job stopped: " : "ddplaunch: job failed: ") +
           s.message + "\n";
  }
}

}  // namespace

std::string format_failure_report(const JobSummary& s) {
  if (s.exit_code == 0 && s.reason == StopReason::k_none) {
    return {};
  }
  std::string out;
  append_rounds(out, s);
  if (s.root_cause) {
    append_root_cause(out, s);
  } else {
    append_stop(out, s);
  }
  append_other_ranks(out, s);
  out += fmt::format("ddplaunch: exit code {}\n", s.exit_code);
  return out;
}

}  // namespace ddplaunch
