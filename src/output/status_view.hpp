// `ddplaunch stacks`' document and text: the nodes' answers put together,
// and each rank's processes' stacks (docs/STATUS.md). `ddplaunch status`'
// own record, document and screen are the status room's (src/status/). Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddplaunch {

// The stacks document of request `n`: the answers of the nodes `asked`
// (nullopt: none came), node 0's giving the job's size; a node outside
// `only` (when given) answered for the job's size only and is not shown.
std::string stacks_document(int64_t n, const std::vector<int>& asked,
                            const std::vector<std::optional<std::string>>& answers,
                            const std::optional<std::set<int>>& only);

// `doc` is stacks_document()'s: every rank's processes and their stacks,
// by rank. Control
// characters in a debugger's output (it may print a process's memory)
// become '?'.
std::string format_stacks(const std::string& doc);

}  // namespace ddplaunch
