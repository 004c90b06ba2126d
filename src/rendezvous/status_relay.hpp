// A `ddplaunch status` request through the tree of agents (topology/tree.hpp):
// node 0's children answer on the job's store as every node does in a job of
// at most --tree-fanout + 1 nodes; below them each node answers on its
// parent's store, under the round's keys there (tree_status_keys()). An
// interior node hands the request on to its children on its own store,
// gathers their answers (each its subtree's records, one per line) until
// its time to gather is up (gather_time()), and answers with its own record
// and theirs; so node 0's store holds one answer per child of node 0, and
// nothing below node 0 costs its store anything (docs/PROTOCOL.md, "Status
// keys"). Not thread-safe: the connection's loop drives it.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/status_responder.hpp"
#include "status/status_record.hpp"
#include "store/connection.hpp"

namespace ddplaunch {

// The keys of the status requests a node hands to its children in round
// `round` (a name of the round), on its own store.
RequestKeys tree_status_keys(const std::string& round);

// How long a node `depth` levels below node 0, in a tree `height` levels
// deep, gathers its children's answers to a request that gives the command
// `timeout_s` for its answers: each level up has a little less, so that each
// node's answer reaches its parent while the parent still gathers.
std::chrono::milliseconds gather_time(double timeout_s, int depth, int height);

// A node's answer and its children's, one record per line ("": none).
std::string join_answers(const std::string& own, const std::vector<std::string>& theirs);

// Reading the answers through the tree (the command, node 0's live page):
// each answer under `under` ("status/<n>/") but node 0's is a node's for
// its subtree (a child of node 0's, or a node whose link to its parent
// broke). The node whose answer `key` is (nullopt: node 0's, a part, or
// another key).
std::optional<int> subtree_answer_of(std::string_view key, std::string_view under, int nnodes);
// Node `node`'s answer for its subtree, placed by node rank among `answers`
// (place_subtree_answer()).
void place_subtree(std::string_view text, int node, int nnodes, int fanout,
                   const std::vector<int>& index, std::vector<std::optional<NodeStatus>>& answers);

// Hands request `request` to `children` on `down` (this node's store for
// them) and gives their answers, joined, once every child has answered or
// `wait` has passed; the request's keys are erased after. `down` must
// outlive the relay's requests (a failed connection never calls back).
void relay_status(StoreConnection& down, const RequestKeys& keys, const std::string& request,
                  const std::vector<int>& children, std::chrono::milliseconds wait,
                  std::function<void(std::string)> done);

}  // namespace ddplaunch
