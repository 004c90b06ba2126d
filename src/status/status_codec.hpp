// The status record's one codec (status_record.hpp <-> JSON, docs/STATUS.md):
// a node's answer as it travels through the store, the merged document as
// `ddplaunch status --json` prints it and /status.json serves it, and a
// request's filters. Decoding never trusts its input (the workers'
// credential may write an answer key too): anything of another shape is
// nullopt, never an exception. Every string is made valid UTF-8 on the way
// out. Pure.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "status/status_record.hpp"

namespace ddplaunch {

std::string encode_node_status(const NodeStatus& node);
std::optional<NodeStatus> decode_node_status(std::string_view text);

std::string encode_status_document(const StatusDocument& doc);
// The same text handed to `sink` in pieces of about 1 MiB as it is written
// (131,072 ranks are about 45 MB of it).
void encode_status_document(const StatusDocument& doc,
                            const std::function<void(std::string_view)>& sink);
std::optional<StatusDocument> decode_status_document(std::string_view text);

// A request's text: {"ranks": "0-3", "nodes": "1", "timeout_s": 5}; "{}" asks
// for everything. nullopt: not an object, or a filter that is not a rank list.
std::string encode_status_request(const StatusRequest& request);
std::optional<StatusRequest> decode_status_request(std::string_view text);

// The nodes of the running round, as node 0's answer to a status or a
// stacks request says (its job's "nnodes"); nullopt where it does not.
std::optional<int> answered_nnodes(std::string_view answer);

// The answers read from the store, decoded (nullopt: none came, or one
// that is not a node's answer); each text is freed once it is read.
std::vector<std::optional<NodeStatus>> decode_answers(
    std::vector<std::optional<std::string>> answers);

// A subtree's answer through the tree of agents (its nodes' records, one
// per line): each record of a node in [first, end) goes to
// answers[index[node]] (index: by node rank, -1 where not asked); a record
// of another node, or a second one of a node, is dropped.
void place_subtree_answer(std::string_view text, int first, int end, const std::vector<int>& index,
                          std::vector<std::optional<NodeStatus>>& answers);

// The document of request `n`: the answers of the nodes `asked` (nullopt:
// none), node 0's giving the job; a node outside `only` (when given)
// answered for the job's size only and is not shown.
StatusDocument merge_status(int64_t n, const std::vector<int>& asked,
                            std::vector<std::optional<NodeStatus>> answers,
                            const std::optional<std::set<int>>& only);

}  // namespace ddplaunch
