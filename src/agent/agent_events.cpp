// The Agent's --event-log: what each event carries (docs/EVENTS.md). A node
// writes its own events (its rendezvous, its round's start and end, its
// ranks' starts and exits, its end); node 0, or the only node, also writes
// the job's (the verdict, restarts, spares taken, lost nodes, preemption).
#include "agent/agent.hpp"
#include "supervise/exit_info.hpp"

namespace ddplaunch {

void Agent::event(std::string_view name, const EventFields& fields) const {
  if (m_events != nullptr) {
    m_events->emit(m_clock.wall_now(), name, fields);
  }
}

bool Agent::writes_job_events() const {
  return m_events != nullptr && (m_link == nullptr || node_rank().value_or(-1) == 0);
}

void Agent::round_ended(const Decision& d, std::string_view next) const {
  if (m_events == nullptr) {
    return;
  }
  EventFields f;
  f.num("round", m_round).num("exit_code", d.exit_code);
  f.num_or_null("root_rank",
                d.root_cause ? std::optional<long long>(d.root_cause->rank) : std::nullopt);
  f.text("reason", stop_reason_name(d.reason)).text("next", next);
  event("round_end", f);
}

void Agent::job_ended() const {
  if (m_events == nullptr) {
    return;
  }
  EventFields f;
  f.num("exit_code", m_summary.exit_code)
      .text("reason", stop_reason_name(m_summary.reason))
      .text("message", m_summary.message);
  f.num_or_null("root_rank", m_summary.root_cause
                                 ? std::optional<long long>(m_summary.root_cause->rank)
                                 : std::nullopt);
  f.num("rounds", m_round + 1).num("restarts", m_restarts);
  f.real("seconds", m_summary.end_time - m_agent_began);
  event("job_end", f);
}

void Agent::on_preflight(int node_rank, double seconds, const std::vector<std::string>& blocked) {
  if (m_events == nullptr) {
    return;
  }
  m_events->set_node_rank(node_rank);
  event("preflight",
        EventFields()
            .num("round", m_round)
            .flag("ok", blocked.empty())
            .real("seconds", seconds)
            .num("blocked", static_cast<long long>(blocked.size()))
            .text_or_null("first_blocked",
                          blocked.empty() ? std::nullopt : std::optional(blocked.front())));
}

void Agent::verdict_events(const JobVerdict& verdict) const {
  if (!writes_job_events()) {
    return;
  }
  EventFields f;
  f.num("round", m_round).num("exit_code", verdict.exit_code).text("message", verdict.message);
  f.num_or_null("root_rank", verdict.root_cause ? std::optional<long long>(verdict.root_cause->rank)
                                                : std::nullopt);
  f.num_or_null("decided_by",
                verdict.node >= 0 ? std::optional<long long>(verdict.node) : std::nullopt);
  f.flag("regroup", verdict.regroup);
  event("verdict", f);
  if (verdict.lost >= 0) {
    event("node_lost", EventFields().num("round", m_round).num("node_rank", verdict.lost));
  }
  if (verdict.preempt > 0) {
    event("preempted",
          EventFields().num("round", m_round).text("signal", signal_name(verdict.preempt)));
  }
}

}  // namespace ddplaunch
