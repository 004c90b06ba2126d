// The store keys agents use (docs/PROTOCOL.md lists each with its record).
// The run's keys are scoped by round (0, then one more per restart), so
// nothing of an old round (a verdict, a heartbeat, a result) leaks into the
// next. Pure.
#pragma once

#include <string>

namespace ddplaunch::keys {

inline const char* const k_arrivals = "rdzv/arrivals";
inline const char* const k_plan = "rdzv/plan";
inline std::string node(int arrival) {
  return "rdzv/node/" + std::to_string(arrival);
}
inline std::string plan(int arrival) {
  return "rdzv/plan/" + std::to_string(arrival);
}
inline std::string ack(int arrival) {
  return "rdzv/ack/" + std::to_string(arrival);
}
// An elastic job's answer to a node that joined after it started (Admission).
inline std::string admit(int arrival) {
  return "rdzv/admit/" + std::to_string(arrival);
}
// Set by the store when a node waiting for admission goes (its last word).
inline std::string left(int arrival) {
  return "rdzv/left/" + std::to_string(arrival);
}
// The network preflight (first round): each node's probe listener
// (ProbeEndpoint), what its probes found, and node 0's go.
inline std::string probe(int node_rank) {
  return "rdzv/probe/" + std::to_string(node_rank);
}
inline std::string probed(int node_rank) {
  return "rdzv/probed/" + std::to_string(node_rank);
}
inline const char* const k_preflight = "rdzv/preflight";
inline std::string round_prefix(int round) {
  return "job/" + std::to_string(round) + "/";
}
inline std::string stop(int round) {
  return round_prefix(round) + "stop";
}
inline std::string succeeded(int round) {
  return round_prefix(round) + "succeeded";
}
// With --restart-min-progress: the nodes whose ranks made enough progress
// in round `round` (a counter each such node adds 1 to, once).
inline std::string progress(int round) {
  return round_prefix(round) + "progress";
}
// Round `round` (>= 1) may start: its topology (a TopologyRecord).
inline std::string round_plan(int round) {
  return round_prefix(round) + "plan";
}
// The node rank of the agent that joined `arrival`th in round `round` (>= 1);
// none when that agent is not part of it.
inline std::string round_rank(int round, int arrival) {
  return round_prefix(round) + "rank/" + std::to_string(arrival);
}
// Node `node`'s heartbeat counter in round `round`: on the job's store, or,
// in a round whose heartbeats go up the tree of agents, on its parent's.
inline std::string heartbeat(int round, int node) {
  return round_prefix(round) + "heartbeat/" + std::to_string(node);
}
// In a round whose heartbeats go up the tree: how many nodes below node
// 0's children have started it (a counter each adds 1 to, once).
inline std::string started(int round) {
  return round_prefix(round) + "started";
}
inline std::string result(int round, int node) {
  return round_prefix(round) + "result/" + std::to_string(node);
}

}  // namespace ddplaunch::keys
