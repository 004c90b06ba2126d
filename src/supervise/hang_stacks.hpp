// What a hung job's stacks say (--hang-timeout). Every rank found without
// progress prints its stacks before it is stopped (Python's faulthandler on
// SIGABRT, a debugger's for a native program); these pure functions read the
// main thread's stack from those lines, group the ranks whose stacks are the
// same, and pick the rank to blame: in a job stuck in a collective, the
// ranks that wait in it share one stack, and the one that hung first is
// elsewhere.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "supervise/summary.hpp"

namespace ddplaunch {

// The main thread's stack in `lines` (a rank's last stderr lines), innermost
// call first, as "fetch_next_batch ← main ← <module>" (at most 8 calls,
// "← …" after them). Reads faulthandler's "Current thread" (or only)
// traceback, eu-stack's first thread and gdb's thread 1; "" when the lines
// hold none.
std::string main_thread_stack(const std::vector<std::string>& lines);

// The index in `ranks` of the hung rank (hung_for_s > 0) to blame: from
// the groups of ranks with the same stack, one outside communication (not
// in a collective, a send or receive, MPI, NCCL or gloo) before one waiting
// on its peers, then the smallest (a stack no other hung rank shares), and
// in it the rank without progress the longest; ranks whose stack is unknown
// only when no hung rank's is known. nullopt when no rank hung.
std::optional<size_t> hang_culprit(const std::vector<RankOutcome>& ranks);

// The hung ranks' stacks, one line per group of ranks with the same stack,
// in hang_culprit()'s order: "  rank 1: fetch_next_batch ← main" and
// "  ranks 0,2-7: all_reduce ← step ← main". "" when no rank hung.
std::string format_hung_stacks(const std::vector<RankOutcome>& ranks);

// Ranks (or node ranks) as a short list, sorted: "0,2-7,9".
std::string rank_list(std::vector<int> ranks);

}  // namespace ddplaunch
