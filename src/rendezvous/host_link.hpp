// HostLink: node 0's side of the StoreLink, on the agent that hosts the
// store. It reads every join record as it arrives and checks it
// (RendezvousPlanner), answers each agent on its own rdzv/plan/<arrival>,
// publishes the plan; while the job runs it reads newcomers (a wait, a
// refusal, or an elastic regroup), watches the nodes' heartbeats, and at
// the end collects every node's results; between rounds it forms each next
// round. Worker ports come from `pick_port` (a free port; tests give their
// own). Not thread-safe: the agent's thread drives it.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/planner.hpp"
#include "rendezvous/store_link.hpp"

namespace ddplaunch {

class HostLink : public StoreLink {
 public:
  using PortPicker = std::function<int()>;
  // The hosts the store refused so far ("HOST (why)"), for the timeout's line.
  using RefusedHosts = std::function<std::vector<std::string>()>;
  HostLink(const Config& config, StoreAddress address, StoreConnection& connection,
           const Clock& clock, PortPicker pick_port, RefusedHosts refused = {});

 protected:
  bool hosts_store() const override { return true; }
  void joined_as(int arrival) override;
  void round_ended(int ended, const std::set<int>& lost) override;
  void verdict_while_joining(const JobVerdict& verdict) override;
  void results_sent() override;
  void report_progress(long long waited_s) override;
  void round_starting(const Topology& topology, TimePoint now) override;
  void all_started() override;
  void preflight_gathered(ProbeReport report) override;

 private:
  // joining (host_link.cpp)
  void wait_for(int arrival);
  void take_record(int arrival, const std::optional<std::string>& text);
  void start_first_round();
  void fail(const std::string& error);
  void refuse(int arrival, const std::string& why);  // that node alone
  void publish_plan(RoundAssignment plan);
  void publish_probe_endpoints(const Topology& topology);
  int worker_port();
  // while the job runs (host_link.cpp)
  void watch_arrivals();  // the next node to join the running job
  void take_arrival(int arrival, const std::optional<std::string>& text);
  void maybe_regroup();
  // heartbeats, results and rounds (host_rounds.cpp)
  void collect_results();
  void missing_at_restart(int ended, const std::vector<std::optional<std::string>>& results);
  void form_next_round();
  void collect_results(int ended);
  void publish_round(RoundAssignment plan);
  void tell_waiting(std::function<void()> then);  // the job ends without them

  PortPicker m_pick_port;
  RefusedHosts m_refused;
  std::optional<RendezvousPlanner> m_planner;
  std::optional<TimePoint> m_last_call;  // an elastic rendezvous closes then
  int m_next_arrival = 0;                // the next join record to read
  bool m_watching_arrivals = false;
  std::set<int> m_gone;  // the nodes the last round lost
  // Waiting for the nodes' results of round m_collecting (-1: not), the
  // wait's generation (a node lost meanwhile starts another wait).
  int m_collecting = -1;
  int m_collect_generation = 0;
  int m_regrouped = -1;  // the round regrouped to admit a node
  // Every node's first heartbeat of the round was seen: each has started
  // it, so a regroup reaches none still joining it.
  int m_all_started = -1;
  TimePoint m_preflight_started{};
  bool m_clear_stop = false;  // the next round's stop key holds a left-out node's last word
};

}  // namespace ddplaunch
