// JobEvents: --event-log's room (docs/EVENTS.md). It observes the Agent's
// round and writes what each event carries: a node's own events (its
// rendezvous, its round's start and end, its ranks' starts and exits, its
// preflight, its end); node 0, or the only node, also writes the job's (the
// verdict, restarts, spares taken, lost nodes, preemption). The health
// check's events are launch.cpp's. Not thread-safe: the agent's thread.
#pragma once

#include <string_view>

#include "agent/round_view.hpp"
#include "config/config.hpp"
#include "output/event_log.hpp"
#include "posix/clock.hpp"

namespace ddplaunch {

class JobEvents : public RoundObserver {
 public:
  // All must outlive it; `nproc` is this node's workers a round.
  JobEvents(EventLog& log, const RoundView& view, const Config& config, int nproc,
            const Clock& clock);

  void on_agent_start() override;
  void on_rendezvous_start() override;
  void on_joined(const Topology& topology, int node_rank, const RoundStart& round) override;
  void on_round_start() override;
  void on_rank_exit(int local_rank, const ExitInfo& info) override;
  void on_verdict(const JobVerdict& verdict) override;
  void on_round_end(const Decision& decision, std::string_view next) override;
  void on_restart(std::string_view kind, int rounds_without_progress) override;
  void on_preflight(int node_rank, double seconds,
                    const std::vector<std::string>& blocked) override;
  void on_job_end(const JobSummary& summary) override;

 private:
  void emit(std::string_view name, const EventFields& fields) const;
  // Node 0's, or the only node's: it writes the job's events too.
  bool writes_job_events() const;

  EventLog& m_log;
  const RoundView& m_view;
  const Config& m_config;
  int m_nproc;
  const Clock& m_clock;
  double m_rendezvous_began = 0;  // wall time this round's rendezvous began
};

}  // namespace ddplaunch
