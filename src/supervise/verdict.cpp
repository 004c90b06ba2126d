#include "supervise/verdict.hpp"

#include "supervise/exit_info.hpp"

namespace ddplaunch {

Decision merge_verdict(const LocalEnd& local, const std::optional<JobVerdict>& job, int node_rank) {
  Decision d;
  if (!job || job->success()) {
    // One node, an unconfirmed verdict, or a job every node finished: this
    // node's own ending decides.
    d.exit_code = local.exit_code;
    d.reason = local.reason;
    d.root_cause = local.root_cause;
    d.stop_signal = local.stop_signal;
  } else {
    d.exit_code = job->exit_code;
    d.root_cause = job->root_cause;
    d.message = job->root_cause ? "" : job->message;
    const bool ours = job->node == node_rank;
    if (job->preempt > 0) {
      d.reason = StopReason::k_preempted;  // on every node: a requeue, not a failure
    } else if (ours && local.reason != StopReason::k_none && local.reason != StopReason::k_remote) {
      d.reason = local.reason;  // this node's rank failed, or its signal stopped the job
      d.stop_signal = local.stop_signal;
    } else {
      d.reason = StopReason::k_remote;
    }
  }
  if (local.late_signal) {
    d.exit_code = 128 + *local.late_signal;
    d.stop_signal = local.late_signal;
    const std::string note =
        "ddplaunch received " + signal_name(*local.late_signal) + " while the job was ending";
    d.message = d.message.empty() ? note : d.message + "; " + note;
    if (d.reason == StopReason::k_none) {
      d.reason = StopReason::k_signal;
    }
  }
  return d;
}

NextRound next_round_after(const Decision& d, const std::optional<JobVerdict>& job, bool elastic,
                           int node_rank, const RestartBudget& budget, bool progress) {
  if (d.stop_signal) {
    return NextRound::k_none;
  }
  if (job && job->regroup) {
    return NextRound::k_regroup;
  }
  if (budget.follow_progress && d.root_cause && d.exit_code != 0 && !progress) {
    // --max-restarts 0 means no restart, with or without progress.
    return budget.max_restarts > 0 && budget.no_progress < budget.max_no_progress
               ? NextRound::k_restart_no_progress
           : budget.max_restarts > 0 ? NextRound::k_stalled
                                     : NextRound::k_none;
  }
  if (budget.restarts >= budget.max_restarts) {
    return NextRound::k_none;
  }
  if (d.root_cause && d.exit_code != 0) {
    return NextRound::k_restart;
  }
  // The store host's loss ends the job: its agents see lost == -1.
  const bool other_lost = job && job->lost >= 0 && job->lost != node_rank;
  return elastic && other_lost ? NextRound::k_restart : NextRound::k_none;
}

}  // namespace ddplaunch
