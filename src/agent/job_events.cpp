#include "agent/job_events.hpp"

#include "supervise/exit_info.hpp"

namespace ddplaunch {

namespace {

std::optional<long long> rank_of(const std::optional<RankOutcome>& root) {
  return root ? std::optional<long long>(root->rank) : std::nullopt;
}

}  // namespace

JobEvents::JobEvents(EventLog& log, const RoundView& view, const Config& config, int nproc,
                     const Clock& clock)
    : m_log(log), m_view(view), m_config(config), m_nproc(nproc), m_clock(clock) {}

void JobEvents::emit(std::string_view name, const EventFields& fields) const {
  m_log.emit(m_clock.wall_now(), name, fields);
}

bool JobEvents::writes_job_events() const {
  return m_view.round().speaks_for_job;
}

void JobEvents::on_agent_start() {
  if (const int node_rank = m_view.round().node_rank; node_rank >= 0) {
    m_log.set_node_rank(node_rank);
  }
  emit("agent_start", EventFields()
                          .text("run_id", m_config.rdzv_id)
                          .num("nnodes", m_config.nnodes)
                          .num("nproc", m_nproc)
                          .num("max_restarts", m_config.max_restarts));
}

void JobEvents::on_rendezvous_start() {
  m_rendezvous_began = m_clock.wall_now();
  emit("rendezvous_start", EventFields().num("round", m_view.round().round));
}

void JobEvents::on_joined(const Topology& topology, int node_rank, const RoundStart& round) {
  m_log.set_node_rank(node_rank);
  emit("rendezvous_end", EventFields()
                             .num("round", round.round)
                             .real("seconds", m_clock.wall_now() - m_rendezvous_began)
                             .num("nnodes", topology.nnodes())
                             .num("world_size", topology.world_size));
  if (node_rank != 0) {
    return;  // node 0 writes the job's events
  }
  for (const auto& r : round.replaced) {
    emit("spare_taken", EventFields()
                            .num("round", round.round)
                            .num("node_rank", r.node_rank)
                            .text("spare", r.spare)
                            .text("lost", r.lost));
  }
}

void JobEvents::on_round_start() {
  const RoundView::Round round = m_view.round();
  m_log.set_node_rank(round.node_rank);
  const auto& pids = m_view.pids();
  emit("round_start", EventFields()
                          .num("round", round.round)
                          .num("world_size", round.world_size)
                          .num("first_rank", round.first_rank)
                          .num("local_ranks", static_cast<long long>(pids.size())));
  for (size_t i = 0; i < pids.size(); ++i) {
    const RoundView::Rank rank = m_view.rank(i);
    emit("rank_start", EventFields()
                           .num("round", round.round)
                           .num("rank", rank.rank)
                           .num("local_rank", rank.local_rank)
                           .num("pid", rank.pid));
  }
}

void JobEvents::on_rank_exit(int local_rank, const ExitInfo& info) {
  const RoundView::Round round = m_view.round();
  const RoundView::Rank rank = m_view.rank(static_cast<size_t>(local_rank));
  EventFields f;
  f.num("round", round.round)
      .num("rank", rank.rank)
      .num("local_rank", local_rank)
      .num("pid", rank.pid)
      .num("exit_code", info.shell_code());
  f.text_or_null("signal",
                 info.by_signal() ? std::optional(signal_name(info.signal())) : std::nullopt);
  f.real("seconds", rank.end_time - round.start_time);
  emit("rank_exit", f);
}

void JobEvents::on_verdict(const JobVerdict& verdict) {
  if (!writes_job_events()) {
    return;
  }
  const int round = m_view.round().round;
  EventFields f;
  f.num("round", round).num("exit_code", verdict.exit_code).text("message", verdict.message);
  f.num_or_null("root_rank", rank_of(verdict.root_cause));
  f.num_or_null("decided_by",
                verdict.node >= 0 ? std::optional<long long>(verdict.node) : std::nullopt);
  f.flag("regroup", verdict.regroup);
  emit("verdict", f);
  if (verdict.lost >= 0) {
    emit("node_lost", EventFields().num("round", round).num("node_rank", verdict.lost));
  }
  if (verdict.preempt > 0) {
    emit("preempted",
         EventFields().num("round", round).text("signal", signal_name(verdict.preempt)));
  }
}

void JobEvents::on_round_end(const Decision& d, std::string_view next) {
  EventFields f;
  f.num("round", m_view.round().round).num("exit_code", d.exit_code);
  f.num_or_null("root_rank", rank_of(d.root_cause));
  f.text("reason", stop_reason_name(d.reason)).text("next", next);
  emit("round_end", f);
}

void JobEvents::on_restart(std::string_view kind, int rounds_without_progress) {
  if (!writes_job_events()) {
    return;
  }
  const RoundView::Round round = m_view.round();
  emit("restart", EventFields()
                      .num("round", round.round)
                      .text("kind", kind)
                      .num("restarts", round.restarts)
                      .num("max_restarts", m_config.max_restarts)
                      .num("rounds_without_progress", rounds_without_progress));
}

void JobEvents::on_preflight(int node_rank, double seconds,
                             const std::vector<std::string>& blocked) {
  m_log.set_node_rank(node_rank);
  emit("preflight",
       EventFields()
           .num("round", m_view.round().round)
           .flag("ok", blocked.empty())
           .real("seconds", seconds)
           .num("blocked", static_cast<long long>(blocked.size()))
           .text_or_null("first_blocked",
                         blocked.empty() ? std::nullopt : std::optional(blocked.front())));
}

void JobEvents::on_job_end(const JobSummary& summary) {
  const RoundView::Round round = m_view.round();
  EventFields f;
  f.num("exit_code", summary.exit_code)
      .text("reason", stop_reason_name(summary.reason))
      .text("message", summary.message);
  f.num_or_null("root_rank", rank_of(summary.root_cause));
  f.num("rounds", round.round + 1).num("restarts", round.restarts);
  f.real("seconds", summary.end_time - round.agent_start_time);
  emit("job_end", f);
}

}  // namespace ddplaunch
