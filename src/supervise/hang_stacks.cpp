#include "supervise/hang_stacks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <map>
#include <string_view>

#include "config/integer.hpp"

namespace ddplaunch {

namespace {

constexpr size_t k_shown_calls = 8;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// "  File "x.py", line 3 in fetch_next_batch" -> "fetch_next_batch".
std::optional<std::string> python_call(std::string_view line) {
  line = trim(line);
  if (!line.starts_with("File \"")) {
    return std::nullopt;
  }
  const size_t in = line.rfind(" in ");
  return in == std::string_view::npos ? std::string("?") : std::string(line.substr(in + 4));
}

// eu-stack's "#0  0x00007f5c clock_nanosleep@GLIBC_2.2.5" and gdb's
// "#1  0x000055 in main () at x.c:3" or "#0  main () at x.c:3" -> the name.
std::optional<std::string> native_call(std::string_view line) {
  line = trim(line);
  if (line.size() < 2 || line[0] != '#' || line[1] < '0' || line[1] > '9') {
    return std::nullopt;
  }
  size_t at = line.find_first_of(" \t");
  std::string_view rest = at == std::string_view::npos ? "" : trim(line.substr(at));
  if (rest.starts_with("0x")) {
    at = rest.find_first_of(" \t");
    rest = at == std::string_view::npos ? "" : trim(rest.substr(at));
  }
  if (rest.starts_with("in ")) {
    rest = trim(rest.substr(3));
  }
  std::string_view name = rest.substr(0, rest.find_first_of(" \t(@"));
  return name.empty() ? std::string("??") : std::string(name);
}

std::string join(const std::vector<std::string>& calls) {
  std::string out;
  for (size_t i = 0; i < calls.size() && i < k_shown_calls; ++i) {
    out += i == 0 ? "" : " ← ";
    out += calls[i];
  }
  if (calls.size() > k_shown_calls) {
    out += " ← …";
  }
  return out;
}

// Whether a stack waits in communication (a collective, a point-to-point
// call, MPI, NCCL, gloo): where the ranks a hung peer holds up wait.
bool waits_on_peers(const std::string& stack) {
  static constexpr std::string_view k_calls[] = {
      "all_reduce", "allreduce",    "all_gather", "allgather", "reduce_scatter", "all_to_all",
      "alltoall",   "broadcast",    "barrier",    "mpi_",      "nccl",           "gloo",
      "c10d",       "processgroup", "recv",       "send",      "irecv",          "isend"};
  std::string lower = stack;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(std::begin(k_calls), std::end(k_calls),
                     [&](std::string_view call) { return lower.find(call) != std::string::npos; });
}

struct Group {
  std::string stack;
  std::vector<size_t> members;  // indices into the ranks
  double longest = 0;           // the longest any member went without progress
};

// The hung ranks by stack, the ones to blame first: known stacks before
// unknown, stacks outside communication before those waiting on peers,
// smaller groups first, then the group that hung longest.
std::vector<Group> groups_of(const std::vector<RankOutcome>& ranks) {
  std::map<std::string, Group> by_stack;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i].hung_for_s <= 0) {
      continue;
    }
    Group& g = by_stack[ranks[i].stack];
    g.stack = ranks[i].stack;
    g.members.push_back(i);
    g.longest = std::max(g.longest, ranks[i].hung_for_s);
  }
  std::vector<Group> out;
  for (auto& [stack, g] : by_stack) {
    out.push_back(std::move(g));
  }
  std::stable_sort(out.begin(), out.end(), [](const Group& a, const Group& b) {
    if (a.stack.empty() != b.stack.empty()) {
      return b.stack.empty();
    }
    if (waits_on_peers(a.stack) != waits_on_peers(b.stack)) {
      return waits_on_peers(b.stack);
    }
    if (a.members.size() != b.members.size()) {
      return a.members.size() < b.members.size();
    }
    return a.longest > b.longest;
  });
  return out;
}

}  // namespace

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return format_ranges(ranks);
}

std::string main_thread_stack(const std::vector<std::string>& lines) {
  // The last traceback block wins: faulthandler prints the current thread
  // (the main thread, where Python runs signal handlers) last; gdb prints
  // thread 1 last; eu-stack prints the process's own thread first.
  std::vector<std::string> python;
  std::vector<std::string> native;
  enum class In { k_none, k_python, k_eu_stack, k_gdb, k_skip } in = In::k_none;
  bool eu_first_seen = false;
  for (const std::string& raw : lines) {
    const std::string_view line = trim(raw);
    if (line.starts_with("Current thread 0x") || line.starts_with("Stack (most recent call")) {
      python.clear();
      in = In::k_python;
    } else if (line.starts_with("Thread 0x")) {
      in = In::k_skip;  // another Python thread
    } else if (line.starts_with("TID ")) {
      in = eu_first_seen ? In::k_skip : In::k_eu_stack;
      if (!eu_first_seen) {
        native.clear();
      }
      eu_first_seen = true;
    } else if (line.starts_with("Thread ") && line.find(" (") != std::string_view::npos) {
      // gdb: "Thread 2 (Thread 0x7f.. (LWP 12) "name"):" ... thread 1 last.
      in = line.starts_with("Thread 1 ") ? In::k_gdb : In::k_skip;
      if (in == In::k_gdb) {
        native.clear();
      }
    } else if (in == In::k_python) {
      if (auto call = python_call(line)) {
        python.push_back(*call);
      } else if (!line.empty()) {
        in = In::k_none;
      }
    } else if (in == In::k_eu_stack || in == In::k_gdb) {
      if (auto call = native_call(line)) {
        native.push_back(*call);
      }
    }
  }
  if (!python.empty()) {
    return join(python);
  }
  return native.empty() ? std::string() : join(native);
}

std::optional<size_t> hang_culprit(const std::vector<RankOutcome>& ranks) {
  const auto groups = groups_of(ranks);
  if (groups.empty()) {
    return std::nullopt;
  }
  const auto& members = groups.front().members;
  return *std::max_element(members.begin(), members.end(), [&](size_t a, size_t b) {
    return ranks[a].hung_for_s < ranks[b].hung_for_s ||
           (ranks[a].hung_for_s == ranks[b].hung_for_s && ranks[a].rank > ranks[b].rank);
  });
}

std::string format_hung_stacks(const std::vector<RankOutcome>& ranks) {
  std::string out;
  for (const Group& g : groups_of(ranks)) {
    std::vector<int> numbers;
    for (size_t i : g.members) {
      numbers.push_back(ranks[i].rank);
    }
    out += fmt::format("  rank{} {}: {}\n", numbers.size() == 1 ? "" : "s", rank_list(numbers),
                       g.stack.empty() ? "(no stack printed)" : g.stack);
  }
  return out;
}

}  // namespace ddplaunch
