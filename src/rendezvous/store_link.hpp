// StoreLink: the JobLink over the store (docs/PROTOCOL.md), in two kinds:
// HostLink on node 0, whose agent hosts the store and plans the job, and
// MemberLink on every other node. Both talk to the store through one
// StoreConnection (requests carry ids, so a parked GET never holds back a
// CAS) and read time from a Clock; they build neither. This base holds what
// both do: joining's first steps, the round's verdict (a GET of
// job/<round>/stop parked for the whole round), heartbeats, publishing a stop
// or a success, reporting results, and a lost store. The Agent owns the
// round and restart counts: the link is told them (next_round()), or learns
// them from node 0 and says so (on_joined()).
// Every call returns at once; the owner's event loop drives the connection
// and calls on_time() by deadline(). Not thread-safe: the agent's thread
// drives it.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "posix/clock.hpp"
#include "rendezvous/job_link.hpp"
#include "rendezvous/preflight.hpp"
#include "rendezvous/records.hpp"
#include "store/connection.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {

// Where the job's store is and the secret it checks, resolved at run time
// (the token read from its file, node 0's address through PMIx), so that
// the Config stays as validated.
struct StoreAddress {
  std::string host;   // node 0's address as this node dials it
  int port = 0;       // --master-port
  std::string token;  // the job's secret; empty: none
};

class StoreLink : public JobLink {
 public:
  using TimePoint = Clock::TimePoint;
  // How often a node that waits for the others says so.
  static constexpr auto k_progress_every = std::chrono::seconds(5);

  // Each must outlive the link. `connection` is fresh: join() sets its
  // failure handler and sends the first requests.
  StoreLink(const Config& config, StoreAddress address, StoreConnection& connection,
            const Clock& clock);
  ~StoreLink() override = default;
  // Who hears the link's answers; set before join().
  void set_listener(Listener& listener) { m_listener = &listener; }
  // What makes the network preflight's connects (it must outlive the
  // link); none: this node probes nothing, and reports so.
  void set_probe(NetworkProbe* probe) { m_probe = probe; }

  // --- JobLink ---------------------------------------------------------------
  void join(const JoinRecord& self) override;
  void publish_stop(const JobVerdict& verdict) override;
  void publish_success() override;
  void report_progress() override;
  void finish(const std::vector<RankOutcome>& local) override;
  void next_round(const std::vector<RankOutcome>& local, const RoundStart& next) override;
  bool admitted() const override { return !m_waiting; }

  // --- the tree of agents (docs/PROTOCOL.md, "The verdict down the tree") -------
  // The running round: its verdict's key is keys::stop(round()).
  int round() const { return m_round.round; }
  // Round `round`'s verdict as read elsewhere (this node's parent's store in
  // the tree), taken as if read from the job's store.
  void verdict_read(int round, const std::string& text);
  // This node reads the running round's verdict elsewhere from now on: its
  // GET of it on the job's store is taken back. watch_store() parks it
  // there again (its link up the tree broke).
  // `done` once the store has taken it back.
  void watch_elsewhere(std::function<void()> done = [] {});
  void watch_store();

  // --- heartbeats up the tree (docs/PROTOCOL.md, "Heartbeats up the tree") ----
  // Reset at each round's start: this node beats on the job's store, and
  // node 0 watches every node's beats there.
  // This node's heartbeats go up the tree for the rest of the round: none
  // until beat_on() says where (its parent's store), and it counts itself
  // once on the job's store (keys::started), for node 0's count of the
  // nodes that started the round.
  void beat_up_the_tree();
  // Its heartbeats go to `to` from now on (nullptr: the job's store: its
  // parent published no store, or its link to it broke). `to` must last the
  // round.
  void beat_on(StoreConnection* to);
  // This node watches the heartbeats of `nodes` in `on` (nullptr: the
  // job's store, where their results are read too) and publishes the loss
  // of one whose count stops moving for --heartbeat-timeout; `counted`:
  // the nodes whose start only the job's store's keys::started counts.
  // `on` must last the round.
  void watch_beats(StoreConnection* on, std::vector<int> nodes, int counted = 0);

  // --- the network preflight's reports up the tree (docs/PROTOCOL.md,
  // "Preflight reports up the tree") ------------------------------------------
  // Until this is called when the preflight starts (the listener's
  // on_preflight_start()), node 0 gathers every node's report on the job's
  // store and a member reports there. This node gathers the reports of
  // `place`'s children (each for its subtree) on `on` (nullptr: the job's
  // store) before it reports its own with theirs; below node 0's children,
  // its report waits for report_to(). `height`: the tree's levels (each
  // level up gathers a little longer). `on` must last the preflight.
  void preflight_through_tree(const TreePlace& place, int height, StoreConnection* on);
  // Where this node's report goes (its parent's store; nullptr: the job's).
  // `to` must last the preflight.
  void report_to(StoreConnection* to);

  // The store answered this node's publish_stop() (whichever verdict won).
  bool stop_confirmed() const { return m_stop_confirmed; }
  // This node leaves mid-run without its ranks' outcomes (an internal error):
  // it reports none, so that node 0 does not wait for them. No listener call.
  void abandon();
  // abandon()'s report reached the store, or there was nothing to report.
  bool abandoned() const { return m_abandoned; }

  // --- its timers ------------------------------------------------------------
  std::optional<TimePoint> deadline() const;
  void on_time(TimePoint now);

 protected:
  enum class Phase { k_idle, k_joining, k_running, k_finishing, k_done };
  // How far the first round's joining went: the arrival counted, the join
  // record stored under it, node 0's answer read (from here on the node is
  // part of the job: a lost connection is a lost node).
  enum class JoinStep { k_adding, k_recording, k_recorded, k_answered };

  // --- what each side does ----------------------------------------------------
  virtual bool hosts_store() const = 0;
  // The store gave this agent its arrival number and holds its join record.
  virtual void joined_as(int arrival) = 0;
  // Round `ended`'s workers here ended and their results are in the store;
  // `lost`: the nodes its verdict said were lost.
  virtual void round_ended(int ended, const std::set<int>& lost) = 0;
  // This node's results are in the store (the job's end).
  virtual void results_sent() = 0;
  // The periodic progress line while joining the first round, once connected.
  virtual void report_progress(long long waited_s) = 0;
  // The round starts here with `topology` (on_joined() follows).
  virtual void round_starting(const Topology&, TimePoint) {}
  // The Agent asked for the next round (next_round()); it is being formed.
  virtual void round_starting_soon() {}
  // The running round's verdict arrived (on_verdict() follows).
  virtual void verdict_arrived() {}
  // Every node this one watches, and those keys::started counts, have
  // started the running round (told once a round).
  virtual void all_started() {}

  // --- shared steps -------------------------------------------------------------
  void watch_verdict();  // parks GET job/<round>/stop
  // A verdict for the round this node is still joining.
  virtual void verdict_while_joining(const JobVerdict& verdict);
  // The round starts here; with `preflight` (the first round, node 0's
  // --preflight), the network preflight runs first.
  void start_job(const Topology& topology, int node_rank, bool preflight = false);
  // This node's report, with its children's (each for its subtree): node 0
  // says go (preflight_passed()) or publishes the blocked paths as the
  // job's verdict; a member reports it (send_report()).
  virtual void preflight_gathered(ProbeReport report) = 0;
  // A member's report is in its parent's store: it waits for node 0's go.
  virtual void preflight_reported() {}
  // Reports `report` where report_to() said, once it has.
  void send_report(ProbeReport report);
  void preflight_passed();
  void deliver(const JobVerdict& verdict);
  void join_failed(int exit_code, const std::string& message);
  void finished(std::vector<RankOutcome> ranks);
  void store_lost(const StoreConnection::Error& error);
  TimePoint now() const { return m_clock.now(); }
  static std::string seconds_text(double s);
  // Node `n`'s host in the running round ("" if unknown), and "node N (host)".
  std::string host_of(int n) const;
  std::string node_text(int n) const;

  const Config& m_config;
  const StoreAddress m_address;
  StoreConnection& m_store;
  const Clock& m_clock;
  Listener* m_listener = nullptr;
  std::string m_where;  // "host:port" of the store
  Phase m_phase = Phase::k_idle;
  JoinRecord m_self;
  TimePoint m_start{};
  TimePoint m_deadline{};  // rendezvous deadline
  TimePoint m_next_progress{};
  RoundStart m_round;  // as the Agent said, or as node 0 admitted this node
  bool m_verdict_delivered = false;
  int m_verdict_exit = 0;                // this round's verdict's exit code (0: none came)
  std::optional<JobVerdict> m_deferred;  // the round's verdict, heard before it started here
  bool m_stop_confirmed = false;
  bool m_abandoned = false;
  bool m_waiting = false;        // joined a running elastic job: not admitted yet
  bool m_spare = false;          // it waits as a hot spare (the job runs at MAX)
  std::set<int> m_lost;          // nodes the round's verdict says are lost
  TimePoint m_round_deadline{};  // by when the next round must start
  int m_node_rank = -1;
  int m_nnodes = 0;
  // The running round's hosts the plan named, by node rank, sorted.
  std::vector<std::pair<int, std::string>> m_hosts;
  std::string m_host_list;  // the running round's plan's, where it had one
  std::vector<RankOutcome> m_local;
  NetworkProbe* m_probe = nullptr;
  // The topology of the round that waits for the network preflight.
  std::optional<Topology> m_preflight_topology;
  TimePoint m_preflight_deadline{};  // by when every node's report is in
  TimePoint m_preflight_began{};     // this node's probes' start
  JoinStep m_join_step = JoinStep::k_adding;
  // The nodes whose preflight reports this node gathers (node 0: every
  // other node, or its children in the tree, each for its subtree).
  std::vector<int> m_pf_children;
  bool m_pf_probed = false;  // this node's own probes have ended

 private:
  void tick(TimePoint now);
  void progress(TimePoint now);
  // Publishes `verdict` as round `round`'s stop unless one is there; the
  // one that holds is delivered.
  void compare_set_stop(const JobVerdict& verdict, int round);
  void begin_round(const Topology& topology, int node_rank);
  // Joining's first steps: an arrival from the store's counter, then the
  // join record under it.
  void take_arrival();
  void record_arrival(int arrival);
  // A new connection after one closed before the node was part of the job;
  // with an arrival taken, whether the store still has it.
  void rejoin();
  void confirm_arrival();
  void probe_peers(std::vector<std::optional<std::string>> endpoints, std::vector<int> peers);
  void probed(const std::vector<ProbeFailure>& failures);
  void gather_reports(ProbeReport own);
  void take_reports(ProbeReport report, const std::vector<std::optional<std::string>>& values);
  void flush_report();
  // The hosts the plan named (m_hosts, m_host_list).
  void take_hosts(const Topology& topology);

  // The preflight's reports: where, until when (the children are
  // protected); where its own goes (nullptr: the job's store), whether it
  // waits for report_to(), and the report that waits.
  std::vector<int> m_pf_subtree;  // each child's subtree's size
  StoreConnection* m_pf_on = nullptr;
  TimePoint m_pf_until{};
  StoreConnection* m_pf_to = nullptr;
  bool m_pf_held = false;
  std::optional<ProbeReport> m_pf_pending;

  // Heartbeats: where this node's go (nullptr: the job's store), whether
  // they wait for beat_on(), whether its start is still to be counted;
  // each switch a new generation, so that an ADD lost with its connection
  // does not hold the next back.
  void beat();
  void check_beats(TimePoint now);
  void beats_read(const std::vector<std::optional<std::string>>& values, TimePoint now);
  TimePoint m_next_tick{};
  StoreConnection* m_beat_to = nullptr;
  bool m_beats_held = false;
  bool m_count_start = false;
  bool m_beat_outstanding = false;
  int m_beat_generation = 0;
  // The heartbeats this node watches: where, whose, each one's last count
  // and when it moved; results read beside them on the job's store.
  StoreConnection* m_watch_on = nullptr;
  std::vector<int> m_watched;
  std::vector<std::pair<long long, TimePoint>> m_last_beat;
  int m_counted = 0;
  int m_watch_generation = 0;
  bool m_check_outstanding = false;
  int m_started_told = -1;                     // the round all_started() was told of
  std::optional<TimePoint> m_finish_deadline;  // a member waits this long for its ack
  std::optional<TimePoint> m_rejoin_at;        // when a closed connection is made anew
  std::chrono::milliseconds m_rejoin_backoff{50};
};

}  // namespace ddplaunch
