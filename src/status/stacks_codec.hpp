// The stacks record's one codec (stacks_record.hpp <-> JSON, docs/STATUS.md):
// a node's answer as it travels through the store, and the merged document
// as `ddplaunch stacks --json` prints it. Decoding never trusts its input
// (the workers' credential may write an answer key too): anything of
// another shape is nullopt, never an exception. Every string is made valid
// UTF-8 on the way out. Pure.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "status/stacks_record.hpp"

namespace ddplaunch {

std::string encode_node_stacks(const NodeStacks& node);
std::optional<NodeStacks> decode_node_stacks(std::string_view text);

std::string encode_stacks_document(const StacksDocument& doc);
std::optional<StacksDocument> decode_stacks_document(std::string_view text);

// The document of request `n`: the answers read from the store for the
// nodes `asked` (nullopt: none came), each decoded once (an answer of
// another shape counts as none), node 0's giving the job's size; a node
// outside `only` (when given) answered for the job's size only and is not
// shown.
StacksDocument merge_stacks(int64_t n, const std::vector<int>& asked,
                            const std::vector<std::optional<std::string>>& answers,
                            const std::optional<std::set<int>>& only);

}  // namespace ddplaunch
