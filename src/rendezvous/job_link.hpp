// JobLink: the agent's connection to the rest of a multi-node job, through
// its three phases: joining (rendezvous), the run (heartbeats, the job's
// verdict), and finishing (every node's results); with restarts, the run is
// repeated in rounds (next_round()). Every call returns at once;
// answers come later through the Listener, from the agent's own event loop.
// StoreLink (store_link.hpp: HostLink on node 0, MemberLink elsewhere)
// implements it over the store; the agent's unit tests use a fake.
// Single-node runs have none.
#pragma once

#include <string>
#include <vector>

#include "rendezvous/planner.hpp"
#include "supervise/summary.hpp"
#include "supervise/verdict.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

// Which round starts, and the restarts the job used before it (the same on
// every node; a node admitted late learns them here).
struct RoundStart {
  int round = 0;
  int restarts = 0;
  int no_progress = 0;  // --restart-min-progress: failed rounds without progress in a row
  std::vector<NodeReplacement> replaced{};  // spares that took a lost node's place (on_joined())
  bool operator==(const RoundStart&) const = default;
};

class JobLink {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // Rendezvous is complete, or the next round may start: the job's
    // topology (a new MASTER_PORT each round; in an elastic job, the nodes
    // of this round), and this node's rank in it.
    virtual void on_joined(const Topology& topology, int node_rank, const RoundStart& round) = 0;
    // Rendezvous failed (exit 3: timeout, disagreement; 4: store lost).
    virtual void on_join_failed(int exit_code, const std::string& message) = 0;
    // A hot spare the job never needed: the job ended with `exit_code`
    // without admitting this node, which ends with it (`message` says so).
    virtual void on_not_needed(int exit_code, const std::string& message) = 0;
    // The job's verdict is known: the first stop any node published (this
    // node's own publish_stop() is answered here too), every node's success,
    // or exit 4 when the store was lost. Called at most once per round.
    virtual void on_verdict(const JobVerdict& verdict) = 0;
    // finish() is done: the ranks known here, by rank (node 0: every node's
    // that reported; other nodes: their own).
    virtual void on_finished(std::vector<RankOutcome> ranks) = 0;
    // The round's nodes met and this node's network preflight starts (the
    // first round, with node 0's --preflight): on_joined() follows if it
    // passes.
    virtual void on_preflight_start(const Topology& topology, int node_rank,
                                    const RoundStart& round) {
      (void)topology;
      (void)node_rank;
      (void)round;
    }
    // This node's (`node_rank`'s) network preflight probes ended after `seconds`: the paths
    // from here found blocked (empty: every one is open). The job's go or
    // stop comes after, from node 0.
    virtual void on_preflight(int node_rank, double seconds,
                              const std::vector<std::string>& blocked) {
      (void)node_rank;
      (void)seconds;
      (void)blocked;
    }
  };

  virtual ~JobLink() = default;
  // Starts joining as `self` (node_rank -1: automatic; arrival is assigned).
  virtual void join(const JoinRecord& self) = 0;
  // This node decided the job is over; on_verdict() says which verdict won.
  virtual void publish_stop(const JobVerdict& verdict) = 0;
  // false while this node waits to be admitted to a running elastic job: a
  // stop it publishes then ends only this node.
  virtual bool admitted() const { return true; }
  // Every local worker succeeded.
  virtual void publish_success() = 0;
  // This node's ranks made enough progress in this round (once a round):
  // a failure verdict then says the round made progress, whichever node
  // publishes it.
  virtual void report_progress() {}
  // Reports this node's outcomes and, on the store host, collects every
  // node's (bounded by the heartbeat timeout, at most 30 s).
  virtual void finish(const std::vector<RankOutcome>& local) = 0;
  // The verdict restarts the job (or regroups an elastic one) and this
  // node's workers have ended: meets the other nodes for round `next`
  // (numbered by the Agent, with the restarts used before it); on_joined()
  // says when it starts, on_join_failed() if it cannot (exit 4: a node did
  // not come, or this one was left out).
  virtual void next_round(const std::vector<RankOutcome>& local, const RoundStart& next) = 0;
};

}  // namespace ddplaunch
