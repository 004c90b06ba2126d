// What a worker's processes use now, for `ddplaunch status`: the CPU time
// and resident memory of each worker's process tree (itself and every
// descendant still running), and the worker's own state letter, from one
// pass over /proc. Read on request only; nothing is sampled in between.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string_view>
#include <vector>

namespace ddplaunch {

struct ProcessUsage {
  double cpu_s = 0;         // user + system time of the tree's live processes
  long long rss_kib = 0;    // their resident set sizes, summed
  int processes = 0;        // in the tree
  char state = '?';         // the root's /proc state: R, S, D, T (stopped), Z...
  std::vector<pid_t> pids;  // the tree's processes: the root first, then by pid
};

// One /proc/PID/stat line's fields: state, parent, CPU ticks, RSS pages.
struct StatFields {
  char state = '?';
  pid_t ppid = 0;
  long long ticks = 0;
  long long rss_pages = 0;
};
// Parses a stat line (its command name may hold spaces and parentheses).
std::optional<StatFields> parse_stat(std::string_view line);

// The tree under each of `roots` (in that order); an ended root: zeros.
std::vector<ProcessUsage> tree_usage(const std::vector<pid_t>& roots);

}  // namespace ddplaunch
