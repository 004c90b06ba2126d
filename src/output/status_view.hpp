// `ddplaunch status`'s screen: the job, its nodes and its ranks as a
// table, from the document the command collected (docs/STATUS.md); and
// `ddplaunch stacks`' text, each rank's processes' stacks. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddplaunch {

// The document of request `n` (docs/STATUS.md): the answers of the nodes
// `asked` (nullopt: none came), node 0's giving the job; a node outside
// `only` (when given) answered for the job's size only and is not shown.
std::string status_document(int64_t n, const std::vector<int>& asked,
                            const std::vector<std::optional<std::string>>& answers,
                            const std::optional<std::set<int>>& only);

// `doc` is the command's JSON document; lines are cut to `width` columns.
std::string format_status(const std::string& doc, int width);

// `doc` is `ddplaunch stacks`' document (status_document() of its
// answers): every rank's processes and their stacks, by rank. Control
// characters in a debugger's output (it may print a process's memory)
// become '?'.
std::string format_stacks(const std::string& doc);

}  // namespace ddplaunch
