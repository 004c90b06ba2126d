// libFuzzer: every record an agent reads from the store (join, plan,
// verdict, outcomes, a preflight report), a node's answer to `ddplaunch status` (its own, and a
// subtree's through the tree of agents) and a status document, and a
// worker's error file. A peer or a stray program
// may have written anything: only RecordError (or nullopt for an error file
// in another format) may come out; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "rendezvous/records.hpp"
#include "status/status_codec.hpp"

using namespace ddplaunch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto each = [&](auto decode) {
    try {
      decode(in);
    } catch (const RecordError&) {
    }
  };
  each([](std::string_view t) { (void)decode_join(t); });
  each([](std::string_view t) {
    if (auto plan = decode_plan(t); plan.topology) {
      // A plan that decodes gives every node an entry within the world.
      const NodeEntry last = entry_from_sizes(plan.topology->sizes, plan.topology->nnodes() - 1);
      if (last.first_rank + last.nproc != plan.topology->world_size) {
        __builtin_trap();
      }
    }
  });
  each([](std::string_view t) { (void)decode_assignment(t); });
  each([](std::string_view t) {
    const JoinAnswer a = decode_answer(t);
    if (a.error.empty() && !a.wait && a.node_rank < 0) {
      __builtin_trap();  // a member's answer always carries a rank checked non-negative
    }
  });
  each([](std::string_view t) { (void)decode_verdict(t); });
  each([](std::string_view t) { (void)decode_outcomes(t); });
  each([](std::string_view t) {
    // A subtree's preflight report, as a parent adds it to its own: bounded.
    const ProbeReport r = decode_probe_report(t);
    ProbeReport into;
    add_to_report(into, r.blocked, r.more);
    if (into.blocked.size() > ProbeReport::k_report_lines || into.more < 0) {
      __builtin_trap();
    }
  });
  each([](std::string_view t) {
    if (auto e = decode_error_file(t)) {
      (void)encode_error_file(*e, 1);  // what is written back must encode
    }
  });
  // What decodes encodes as text that decodes, and settles after one
  // pass (invalid UTF-8 made U+FFFD, a huge number's infinity null).
  const auto settles = [](auto decode, auto encode, std::string_view t) {
    if (const auto first = decode(t)) {
      const auto second = decode(encode(*first));
      if (!second) {
        __builtin_trap();
      }
      const std::string text = encode(*second);
      const auto third = decode(text);
      if (!third || encode(*third) != text) {
        __builtin_trap();
      }
    }
  };
  settles(decode_node_status, encode_node_status, in);
  settles(
      decode_status_document, [](const StatusDocument& doc) { return encode_status_document(doc); },
      in);
  // A subtree's answer through the tree of agents (nodes 2 to 5 of 8, nodes
  // 3 and 5 asked): only asked nodes of the subtree are placed, each as
  // itself.
  std::vector<std::optional<NodeStatus>> answers(2);
  place_subtree_answer(in, 2, 6, {-1, -1, -1, 0, -1, 1, -1, -1}, answers);
  if ((answers[0] && answers[0]->node_rank != 3) || (answers[1] && answers[1]->node_rank != 5)) {
    __builtin_trap();
  }
  return 0;
}
