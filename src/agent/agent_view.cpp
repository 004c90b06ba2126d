// The Agent as the RoundView the rooms read (status, stacks, the event
// log), and the preflight they are told of. Part of agent.hpp's Agent.
#include "agent/agent.hpp"

namespace ddplaunch {

RoundView::Round Agent::round() const {
  Round r;
  r.node_rank = m_link == nullptr ? 0 : node_rank().value_or(-1);
  r.speaks_for_job = m_link == nullptr || r.node_rank == 0;
  r.state = m_phase == Phase::k_done || m_phase == Phase::k_gathering ? "ending"
            : m_phase == Phase::k_running                             ? "running"
            : m_phase == Phase::k_joining                             ? "joining"
                                                                      : "stopping";
  r.round = m_round;
  r.restarts = m_restarts;
  r.start_time = m_start_time;
  r.agent_start_time = m_agent_began;
  r.topology = m_topology ? &*m_topology : nullptr;
  if (m_plan) {
    r.nnodes = m_plan->layout.nnodes;
    r.world_size = m_plan->layout.world_size;
    r.first_rank = m_plan->layout.rank_offset;
  }
  return r;
}

RoundView::Rank Agent::rank(size_t i) const {
  Rank r;
  r.local_rank = static_cast<int>(i);
  r.pid = m_pids.at(i);
  r.rank = m_plan && i < m_plan->workers.size() ? m_plan->workers[i].rank : -1;
  r.exit = m_supervisor ? m_supervisor->exit_of(static_cast<int>(i)) : std::nullopt;
  r.end_time = i < m_end_times.size() ? m_end_times[i] : 0;
  r.stopping = m_phase != Phase::k_running || (m_supervisor && m_supervisor->stopping());
  const OutputRouter::Activity act = m_router.activity(static_cast<int>(i));
  r.progress_events = act.lines + (i < m_progress_writes.size() ? m_progress_writes[i] : 0);
  r.last_progress = i < m_last_progress.size() ? last_progress(i) : m_clock.now();
  r.last_line = act.last_line;
  return r;
}

void Agent::on_preflight_start(const Topology& topology, int node_rank, const RoundStart& round) {
  tell(&RoundObserver::on_preflight_start, topology, node_rank, round);
}

void Agent::on_preflight(int node_rank, double seconds, const std::vector<std::string>& blocked) {
  tell(&RoundObserver::on_preflight, node_rank, seconds, blocked);
}

}  // namespace ddplaunch
