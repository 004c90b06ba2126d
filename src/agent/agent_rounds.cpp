// How the Agent ends a round: finishing, gathering every node's results, a
// restart (same nodes, or a new membership), or an early end. Part of
// agent.hpp's Agent.
#include <algorithm>
#include <utility>

#include "agent/agent.hpp"
#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "supervise/hang_stacks.hpp"

namespace ddplaunch {

void Agent::start_finishing() {
  log::debug("every local worker has ended: finishing");
  m_phase = Phase::k_finishing;
  m_round_progress = round_progress();  // what the round made while it ran
  m_progress_frozen = true;
  m_spawner.kill_all();
  m_drain_deadline = m_clock.now() + k_drain_timeout;
  m_sweep_at = m_clock.now() + k_sweep_after;
}

void Agent::end_gathering(std::optional<std::vector<RankOutcome>> ranks) {
  if (m_phase == Phase::k_done) {
    return;
  }
  for (int lr = 0; lr < static_cast<int>(m_pids.size()); ++lr) {
    m_router.on_close(lr, Stream::k_out);
    m_router.on_close(lr, Stream::k_err);
  }
  const int node_rank = m_plan->layout.node_rank;
  const Decision d =
      merge_verdict(local_end(), m_link != nullptr ? m_verdict : std::nullopt, node_rank);
  m_summary.rounds = rounds(d);
  m_summary.restarts = m_restarts;
  m_summary.max_restarts = m_config.max_restarts;
  m_summary.run_id = m_config.rdzv_id;
  m_summary.exit_code = m_stalled ? k_exit_no_requeue : d.exit_code;
  m_summary.reason = d.reason;
  m_summary.stop_signal = d.stop_signal;
  m_summary.root_cause = d.root_cause;
  m_summary.message = d.message;
  if (d.reason == StopReason::k_preempted && d.message.empty()) {
    m_summary.message = m_preempted_by;
  }
  m_summary.start_time = m_start_time;
  m_summary.end_time = m_clock.wall_now();
  m_summary.topology = m_topology;
  if (ranks) {
    m_summary.ranks = std::move(*ranks);
  } else {
    m_summary.ranks = outcomes();
  }
  // A hung job: every node's hung ranks and their stacks are known now, and
  // the rank to blame may be another node's than the verdict's first one.
  if (m_summary.root_cause && m_summary.root_cause->hung_for_s > 0) {
    if (auto i = hang_culprit(m_summary.ranks);
        i && m_summary.ranks[*i].rank != m_summary.root_cause->rank) {
      const RankOutcome& c = m_summary.ranks[*i];
      m_summary.root_cause = c.node_rank == node_rank ? root_outcome(c.local_rank) : c;
      if (!m_summary.rounds.empty()) {
        m_summary.rounds.back().root_cause = m_summary.root_cause;
      }
    }
  }
  tell(&RoundObserver::on_round_end, d, std::string_view("none"));
  tell(&RoundObserver::on_job_end, m_summary);
  m_phase = Phase::k_done;
}

LocalEnd Agent::local_end() const {
  LocalEnd local;
  local.reason = m_supervisor->reason();
  local.exit_code = m_supervisor->exit_code();
  local.stop_signal = m_supervisor->stop_signal();
  local.late_signal = m_late_signal;
  if (auto root = m_supervisor->root_cause()) {
    // A hang's first rank to end is not the one to blame: the stacks say.
    local.root_cause = root_outcome(is_hung(*root) ? local_hang_culprit().value_or(*root) : *root);
  }
  return local;
}

bool Agent::try_restart() {
  // Whether the job restarts is the job's verdict's to say (the same on every
  // node), not a late signal's: a node that received one goes to the next
  // round only to stop it everywhere. One node alone just stops.
  LocalEnd quiet = local_end();
  quiet.late_signal.reset();
  const Decision d =
      merge_verdict(quiet, m_link != nullptr ? m_verdict : std::nullopt, m_plan->layout.node_rank);
  const bool known = m_link == nullptr || m_verdict;
  const bool stopping_here = m_late_signal && m_link == nullptr;
  if (!known || stopping_here) {
    return false;
  }
  const RestartBudget budget{m_restarts, m_config.max_restarts, m_config.progress_restarts(),
                             m_no_progress, m_config.max_no_progress_restarts};
  const NextRound next =
      next_round_after(d, m_link != nullptr ? m_verdict : std::nullopt, m_config.elastic(),
                       m_plan->layout.node_rank, budget, round_made_progress());
  if (next == NextRound::k_none || next == NextRound::k_stalled) {
    m_stalled = next == NextRound::k_stalled;
    return false;
  }
  restart(outcomes(), d, next);
  return true;
}

// Whether this round made progress: as the verdict says (the node that
// published it read every node's), else this node's own count; true when
// progress is not followed, or not known.
bool Agent::round_made_progress() const {
  if (!m_config.progress_restarts()) {
    return true;
  }
  if (m_verdict && m_verdict->progress >= 0) {
    return m_verdict->progress > 0;
  }
  return m_link == nullptr ? made_progress() : true;
}

RoundSummary Agent::round_summary(const Decision& d, bool regroup) const {
  RoundSummary r;
  r.round = m_round;
  r.nnodes = m_plan->layout.nnodes;
  r.regroup = regroup;
  r.exit_code = d.exit_code;
  r.root_cause = d.root_cause;
  r.message = d.message;
  r.start_time = m_start_time;
  r.end_time = m_clock.wall_now();
  r.replaced = m_replaced;
  if (m_config.progress_restarts()) {
    r.progress_events = round_progress();
    r.made_progress = round_made_progress();
  }
  return r;
}

std::vector<RoundSummary> Agent::rounds(const Decision& last) const {
  std::vector<RoundSummary> all = m_rounds;
  if (m_supervisor) {
    all.push_back(round_summary(last, false));
  }
  return all;
}

void Agent::count_round(const Decision& d, NextRound next) {
  const bool regroup = next == NextRound::k_regroup;
  const char* kind = regroup                                    ? "regroup"
                     : next == NextRound::k_restart_no_progress ? "restart_without_progress"
                                                                : "restart";
  tell(&RoundObserver::on_round_end, d, std::string_view(kind));
  m_rounds.push_back(round_summary(d, regroup));
  ++m_round;
  if (regroup) {
    log::info("{}: restarting every worker to admit it (no restart used)",
              describe_round_end(m_rounds.back()));
  } else if (next == NextRound::k_restart_no_progress) {
    ++m_no_progress;
    ++m_no_progress_restarts;
    log::warn(
        "{} without progress: restarting every worker ({} of {} rounds in a row without "
        "progress; --max-restarts not used)",
        describe_round_end(m_rounds.back()), m_no_progress, m_config.max_no_progress_restarts);
  } else {
    ++m_restarts;
    if (m_rounds.back().made_progress == true) {
      m_no_progress = 0;
    }
    log::warn("{}: restarting every worker (restart {} of {})", describe_round_end(m_rounds.back()),
              m_restarts, m_config.max_restarts);
  }
  tell(&RoundObserver::on_restart, std::string_view(kind), m_no_progress);
}

bool Agent::reclaim_last_round() {
  for (int lr = 0; lr < static_cast<int>(m_pids.size()); ++lr) {
    m_router.on_close(lr, Stream::k_out);  // a last unfinished line is shown now
    m_router.on_close(lr, Stream::k_err);
  }
  // A new round never starts beside the last one's leftovers (a process that
  // escaped its worker's group, holding a GPU or a port).
  int killed = 0;
  const auto reclaim_deadline = m_clock.now() + millis(m_config.restart_reclaim_timeout_s);
  const auto left = m_spawner.reclaim(millis(m_config.restart_reclaim_timeout_s), killed);
  killed += std::exchange(m_swept, 0);  // and those the finishing sweep killed
  if (killed > 0) {
    log::info("killed {} process{} the last round left behind", killed, killed == 1 ? "" : "es");
  }
  if (!left.empty()) {
    end_early(k_exit_node_lost, StopReason::k_none,
              fmt::format("{} cannot start the next round: pid {} of the last round is still "
                          "alive after --restart-reclaim-timeout {} s (in uninterruptible sleep?); "
                          "this node leaves the job",
                          node_name(), left.front(), m_config.restart_reclaim_timeout_s),
              true);
    return false;
  }
  // Nor beside GPU memory the last round's workers still hold: the driver
  // frees a dead process's memory after it has gone (NVML, where present).
  if (!m_gpu_release_wait) {
    return true;
  }
  const auto left_for_gpus = std::max(
      std::chrono::milliseconds(0),
      std::chrono::duration_cast<std::chrono::milliseconds>(reclaim_deadline - m_clock.now()));
  if (const auto holding = m_gpu_release_wait(m_pids, left_for_gpus)) {
    end_early(k_exit_node_lost, StopReason::k_none,
              fmt::format("{} cannot start the next round: pid {} of the last round still holds "
                          "GPU memory after --restart-reclaim-timeout {} s (nvidia-smi shows "
                          "it); this node leaves the job: raise the timeout if the driver is "
                          "only slow to free it",
                          node_name(), *holding, m_config.restart_reclaim_timeout_s),
              true);
    return false;
  }
  return true;
}

// --health-check again, before every round: a node that fails it does not
// start the round (alone, or in an elastic job: it leaves; in a fixed-size
// job: every node ends, naming it, and `unhealthy` says why).
bool Agent::check_health_again(std::optional<std::string>& unhealthy) {
  if (!m_health_check) {
    return true;
  }
  if (auto failed = m_health_check()) {
    unhealthy = fmt::format("{} failed its health check before round {}: {}", node_name(), m_round,
                            *failed);
    if (m_link == nullptr || m_config.elastic()) {
      end_early(k_exit_unhealthy, StopReason::k_none,
                *unhealthy + (m_link == nullptr ? "" : "; it leaves the job"), true);
      return false;
    }
  }
  return true;
}

void Agent::clear_round() {
  m_supervisor.reset();
  m_pids.clear();
  m_end_times.clear();
  m_verdict.reset();
  m_publish_deadline.reset();
  m_published_stop = false;
  m_published_success = false;
  m_drain_deadline.reset();
  m_sweep_at.reset();
  m_gathered.reset();
}

void Agent::restart(const std::vector<RankOutcome>& local, const Decision& d, NextRound next) {
  count_round(d, next);
  std::optional<std::string> unhealthy;
  if (!reclaim_last_round() || !check_health_again(unhealthy)) {
    return;
  }
  clear_round();
  if (m_link != nullptr) {
    m_phase = Phase::k_joining;
    tell(&RoundObserver::on_rendezvous_start);
    m_link->next_round(local, RoundStart{m_round, m_restarts, m_no_progress});
    if (unhealthy) {
      publish(JobVerdict{k_exit_unhealthy, *unhealthy, std::nullopt, m_plan->layout.node_rank});
    } else if (m_late_signal) {
      // Received while this round ended: the next one is stopped on every node.
      m_join_signal = std::exchange(m_late_signal, std::nullopt);
      publish(JobVerdict{
          128 + *m_join_signal,
          node_name() + " received " + signal_name(*m_join_signal) + " while the job restarted",
          std::nullopt, m_plan->layout.node_rank});
    }
    return;
  }
  Topology again = *m_topology;
  if (!m_config.worker_port && m_self.pick_port) {
    again.master_port = m_self.pick_port();  // the last one may be in TIME_WAIT
  }
  begin(again, 0);
}

void Agent::end_early(int exit_code, StopReason reason, const std::string& message, bool is_error) {
  m_summary.run_id = m_config.rdzv_id;
  m_summary.max_restarts = m_config.max_restarts;
  m_summary.restarts = m_restarts;
  m_summary.rounds = m_rounds;
  m_summary.exit_code = exit_code;
  m_summary.reason = reason;
  m_summary.message = message;
  if (reason == StopReason::k_signal && m_join_signal) {
    m_summary.stop_signal = m_join_signal;
    if (message.empty()) {
      m_summary.message = "ddplaunch received " + signal_name(*m_join_signal) +
                          " while waiting for the other nodes";
    }
  }
  m_summary.start_time = m_start_time;
  m_summary.end_time = m_clock.wall_now();
  m_summary.topology = m_topology;
  if (is_error) {
    m_error = message;
  }
  tell(&RoundObserver::on_job_end, m_summary);
  m_phase = Phase::k_done;
}

}  // namespace ddplaunch
