// StoreLink: the JobLink over the store (docs/PROTOCOL.md). The agent whose
// host is --master-addr hosts the StoreServer (its own thread); every agent
// talks to it through three non-blocking connections, so a request never
// waits behind one the server holds: `watch` parks GET job/stop for the whole
// run, `wait` holds rendezvous and result waits, `rpc` carries short requests
// (joining, heartbeats, the verdict's compare-and-set, results)
// (any job's store host holds a fourth, `arrivals`, parked on the next join
// record while the job runs: a newcomer is answered, waits or is refused).
// The owner's event loop watches watches(), calls on_ready() and on_time().
// No socket operation blocks, so a stalled store host delays no signal,
// output or reaping; but each connect attempt resolves --master-addr with
// getaddrinfo() on the agent's thread, which can wait on a slow resolver.
// Not thread-safe: the agent's thread drives it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "rendezvous/job_link.hpp"
#include "store/async_client.hpp"
#include "store/server.hpp"

namespace ddplaunch {

class StoreLink : public JobLink {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  // How often a node that waits for the others says so.
  static constexpr auto k_progress_every = std::chrono::seconds(5);

  // `config` must outlive the link. Starts nothing until join().
  explicit StoreLink(const Config& config);
  // Who hears the link's answers; set before join().
  void set_listener(Listener& listener) { m_listener = &listener; }
  ~StoreLink() override;

  void join(const JoinRecord& self) override;
  void publish_stop(const JobVerdict& verdict) override;
  // The store answered this node's publish_stop() (whichever verdict won).
  bool stop_confirmed() const { return m_stop_confirmed; }
  bool admitted() const override { return !m_waiting; }
  // This node leaves mid-run without its ranks' outcomes (an internal error):
  // it reports none, so that node 0 does not wait for them. No listener call.
  void abandon();
  // abandon()'s report reached the store, or there was nothing to report.
  bool abandoned() const { return m_abandoned; }
  void publish_success() override;
  void finish(const std::vector<RankOutcome>& local) override;
  void next_round(const std::vector<RankOutcome>& local, int restarts) override;

  // --- driving it -------------------------------------------------------------
  struct Watch {
    int fd;
    uint32_t events;
    uint64_t id;
  };
  // `id` changes whenever a connection gets a new socket (the fd number may be reused).
  std::vector<Watch> watches() const;
  void on_ready(int fd, uint32_t events, TimePoint now);
  std::optional<TimePoint> deadline() const;
  void on_time(TimePoint now);

 private:
  enum class Phase { k_idle, k_joining, k_running, k_finishing, k_done };

  // joining (store_link.cpp)
  void host_store();
  void joined_as(int arrival);
  void host_wait_for(int k);
  void start_first_round();
  void host_fail(const std::string& error);
  void refuse(int arrival, const std::string& why);  // that node alone
  void wait_for_answer();
  void publish_plan(const JobPlan& plan);
  void take_answer(const std::string& text);
  void take_plan(const std::optional<std::string>& text, int node_rank);
  // `node_rank` (read from `key`) is checked against the plan before use.
  void take_assignment(Topology topology, int node_rank, const std::string& key);
  void join_failed(int exit_code, const std::string& message);
  // elastic membership (elastic.cpp)
  void watch_arrivals();  // the store host: the next node to join the running job
  void take_arrival(int arrival, const std::optional<std::string>& text);
  void maybe_regroup();
  void wait_for_admission();  // a node that joined once the job ran
  void take_admission(const std::optional<std::string>& text);
  void form_next_round();
  void publish_round(const JobPlan& plan);
  void take_round_plan(const std::optional<std::string>& text);
  void tell_waiting(std::function<void()> then);  // the job ends without them
  void watch_verdict();  // parks GET job/<round>/stop on the watch connection
  void verdict_while_joining(const JobVerdict& verdict);
  void progress(TimePoint now);
  // A connection failed. The watch connection carries the verdict, and node
  // 0 sends it before it closes anything; so when another connection fails
  // first, the watch gets a moment (k_watch_grace) to deliver it.
  void connection_lost(const std::string& why, bool is_watch);
  void store_lost(std::string why);  // by value: it resets m_lost_why, which may be the argument
  // running and finishing (job_phase.cpp)
  void start_job(const Topology& topology, int node_rank);
  void leave_last_word();  // ON_CLOSE: the store says this node was lost if it goes
  void tick(TimePoint now);
  void check_heartbeats(const std::vector<std::optional<std::string>>& values, TimePoint now);
  void deliver(const JobVerdict& verdict);
  void collect_results();
  // rounds (job_phase.cpp)
  void host_next_round(int ended);
  void missing_at_restart(int ended, const std::vector<std::optional<std::string>>& results);
  void wait_for_round_plan();
  void finished(std::vector<RankOutcome> ranks);

  const Config& m_config;
  Listener* m_listener = nullptr;
  std::string m_where;  // "host:port" of the store
  Phase m_phase = Phase::k_idle;
  std::unique_ptr<StoreServer> m_server;
  std::unique_ptr<AsyncClient> m_rpc;
  std::unique_ptr<AsyncClient> m_watch;
  std::unique_ptr<AsyncClient> m_wait;
  std::unique_ptr<AsyncClient> m_arrivals;  // an elastic job's store host only
  TimePoint m_start{};
  TimePoint m_deadline{};  // rendezvous deadline
  TimePoint m_next_progress{};
  JoinRecord m_self;
  std::optional<RendezvousPlanner> m_planner;
  bool m_verdict_delivered = false;
  std::optional<JobVerdict> m_deferred;  // the round's verdict, heard before it started here
  bool m_stop_confirmed = false;
  bool m_abandoned = false;
  std::optional<std::string> m_lost_why;  // a connection other than the watch failed
  bool m_refused = false;                 // a connection was refused at the handshake
  TimePoint m_lost_deadline{};
  // running
  int m_round = 0;         // 0, then one more per restart: the run's keys are scoped by it
  int m_restarts = 0;      // the restarts the job used before this round
  bool m_waiting = false;  // joined a running elastic job: not admitted yet
  std::optional<TimePoint> m_last_call;  // an elastic rendezvous closes then
  int m_next_arrival = 0;                // the store host: the next join record to read
  std::set<int> m_gone;                  // the nodes the last round lost
  int m_regrouped = -1;                  // the round the store host regrouped to admit a node
  // The store host saw every node's first heartbeat of the round: each has
  // started it, so a regroup reaches none still joining it.
  int m_all_started = -1;
  std::pair<int, int> m_last_word{-1, -1};  // the (round, node rank) it names
  Topology m_topology;
  TimePoint m_round_deadline{};  // by when the next round must start
  int m_node_rank = -1;
  int m_nnodes = 0;
  std::vector<std::string> m_hosts;
  TimePoint m_next_tick{};
  bool m_beat_outstanding = false;
  bool m_check_outstanding = false;
  std::vector<std::pair<long long, TimePoint>> m_last_beat;
  std::set<int> m_lost;
  std::vector<RankOutcome> m_local;
  std::optional<TimePoint> m_finish_deadline;  // a non-host waits this long for its ack
};

}  // namespace ddplaunch
