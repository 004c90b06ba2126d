// The records agents exchange through the store (docs/PROTOCOL.md): a join,
// the round's topology, each agent's answer and admission, the verdict and
// each node's results. A rank's outcome inside them is encoded by
// output/report_json.hpp, as in the reports. Strings are made valid UTF-8
// before encoding (invalid bytes become U+FFFD), so no byte a worker wrote can
// stop a record from being written. Reading a record checks every field; a
// malformed one is a RecordError, never a crash. Pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "output/report_json.hpp"
#include "rendezvous/planner.hpp"
#include "rendezvous/preflight.hpp"
#include "supervise/verdict.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// rdzv/node/<arrival>
std::string encode_join(const JoinRecord& record);
JoinRecord decode_join(std::string_view text);
// What stands under an arrival that a node gave up (it lost the ADD's
// answer, so no record may ever come): node 0 passes over it.
inline const char* const k_vacant_arrival = "vacant";

// rdzv/plan: what every node reads once every node has joined: the job's
// topology (its sizes, not every node: Topology), or the error that ended
// rendezvous. Its size does not grow with the node count unless workers
// reserve ports.
// job/<round>/plan (round >= 1) is the same record with the restarts the
// job has used so far (elastic rounds that admit a node use none).
struct TopologyRecord {
  std::optional<Topology> topology;
  std::string error;  // set when topology is not
  int restarts = 0;
  int no_progress = 0;  // failed rounds without progress in a row (--restart-min-progress)
  // rdzv/plan only: the nodes run the network preflight before the workers
  // start (node 0's --preflight decides for the job).
  bool preflight = false;
  // job/<round>/plan: the spares this round took in a lost node's place.
  std::vector<NodeReplacement> replaced{};
  // job/<round>/plan: node 0 cleared job/<round>/stop, which held the last
  // word of a node this round leaves out: a node that heard it forgets it.
  bool stop_cleared = false;
};
std::string encode_plan(const TopologyRecord& record);
TopologyRecord decode_plan(std::string_view text);

// rdzv/probe/<node rank>: a node's probe listener (the network preflight).
std::string encode_probe_endpoint(const ProbeEndpoint& endpoint);
ProbeEndpoint decode_probe_endpoint(std::string_view text);
// rdzv/probed/<node rank>: what that node's probes found, and, past
// --tree-fanout + 1 nodes, its subtree's (docs/PROTOCOL.md, "Preflight
// reports up the tree"): one line per blocked path (describe_blocked()) or
// per node that did not report, at most k_report_lines of them, and how
// many more there were; none when every path was open.
struct ProbeReport {
  static constexpr size_t k_report_lines = 64;
  std::vector<std::string> blocked;
  long long more = 0;
  bool operator==(const ProbeReport&) const = default;
};
std::string encode_probe_report(const ProbeReport& report);
ProbeReport decode_probe_report(std::string_view text);
// Adds `lines` (and `more` past them) to `into`, within k_report_lines.
void add_to_report(ProbeReport& into, const std::vector<std::string>& lines, long long more = 0);

// rdzv/plan/<arrival>: node 0's answer to the agent that joined `arrival`th,
// the one key that agent waits for: its node rank in the first round, or why
// it is refused (alone, or with the whole rendezvous), or (an elastic job
// that already runs) that it waits to be admitted.
struct JoinAnswer {
  int node_rank = -1;  // >= 0: a member of the first round
  std::string error;   // set: refused
  bool wait = false;   // an elastic job's newcomer: wait for rdzv/admit/<arrival>
  bool spare = false;  // with wait: the job runs at MAX, so it waits as a hot spare
  bool operator==(const JoinAnswer&) const = default;
};
std::string encode_answer(const JoinAnswer& answer);
JoinAnswer decode_answer(std::string_view text);

// job/<round>/rank/<arrival>: the node rank that agent got in the round.
std::string encode_assignment(int node_rank);
int decode_assignment(std::string_view text);

// rdzv/admit/<arrival>: an elastic job's answer to a node that joined after
// it started: the round it is admitted at, or why it never will be.
struct Admission {
  int round = 0;
  std::string error;  // set when round is not
  // With error: the job ended with this exit code without admitting the
  // node (a hot spare it never needed ends with it); -1: not said.
  int job_exit = -1;
};
std::string encode_admission(const Admission& admission);
Admission decode_admission(std::string_view text);

// job/stop
std::string encode_verdict(const JobVerdict& verdict);
JobVerdict decode_verdict(std::string_view text);

// job/result/<node>: a node's ranks' outcomes, encode_outcomes() and
// decode_outcomes() of output/report_json.hpp.

}  // namespace ddplaunch
