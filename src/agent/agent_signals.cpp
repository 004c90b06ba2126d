// How the Agent takes the signals the launcher receives: who sent one (a
// terminal, Slurm, the launching command), the job's stop or a forwarded
// signal, and --preempt-signal. Part of agent.hpp's Agent.
#include <csignal>

#include "agent/agent.hpp"
#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "supervise/signal_policy.hpp"

namespace ddplaunch {

std::string Agent::received(int sig, SignalFrom from) const {
  if (from == SignalFrom::k_stopped_by_command) {
    return "the launching command stopped the job";
  }
  if (from == SignalFrom::k_cut_off) {
    return node_name() +
           " lost its connection to the launching command (its ssh dropped, or the command was "
           "killed)";
  }
  return (from == SignalFrom::k_launching_command ? std::string("the launching command")
                                                  : node_name()) +
         " received " + signal_name(sig);
}

void Agent::on_signal(int sig, SignalFrom from) {
  const bool workers_have_it = from == SignalFrom::k_slurm;
  m_stopped_by_command = m_stopped_by_command || from == SignalFrom::k_stopped_by_command;
  if (m_config.preempt_signal == sig) {
    preempt(sig, workers_have_it);
    return;
  }
  const auto now = m_clock.now();
  switch (m_phase) {
    case Phase::k_joining:
      if (is_forwarded_signal(sig)) {
        log::debug("received {} while joining: no worker to forward it to", signal_name(sig));
        return;
      }
      if (m_join_signal || m_link == nullptr) {
        m_join_signal = m_join_signal.value_or(sig);
        end_early(
            128 + *m_join_signal, StopReason::k_signal,
            from != SignalFrom::k_anyone && from != SignalFrom::k_slurm ? received(sig, from) : "",
            false);
        return;
      }
      m_join_signal = sig;
      // The command that stopped the job says why; this node says no more.
      log::emit(from == SignalFrom::k_stopped_by_command ? log::Level::debug : log::Level::info,
                "{}: {}",
                from == SignalFrom::k_anyone || from == SignalFrom::k_slurm
                    ? "received " + signal_name(sig)
                    : received(sig, from),
                m_link->admitted() ? "leaving rendezvous and stopping the job on every node"
                                   : "leaving; the running job goes on without this node");
      publish(JobVerdict{128 + sig, received(sig, from) + " while waiting for the other nodes",
                         std::nullopt, -1});
      break;
    case Phase::k_running: {
      if (!m_supervisor) {
        break;  // ending with an error already
      }
      const bool was_stopping = m_supervisor->stopping();
      if (is_forwarded_signal(sig) && from == SignalFrom::k_slurm) {
        log::info(
            "received {} from Slurm, which sent it to every worker of the step too: not "
            "sending it again",
            signal_name(sig));
        break;
      }
      log::emit(from == SignalFrom::k_stopped_by_command ? log::Level::debug : log::Level::info,
                "received {}: {}", signal_name(sig),
                is_forwarded_signal(sig) ? "forwarding it to the workers"
                : was_stopping           ? "killing the workers now"
                                         : "stopping the workers");
      if (was_stopping && !is_forwarded_signal(sig) &&
          m_supervisor->reason() != StopReason::k_signal) {
        m_late_signal = sig;  // stopping for another reason: this one decides our exit code
      }
      apply(m_supervisor->on_launcher_signal(sig, now));
      if (!was_stopping && m_supervisor->stopping() && m_link != nullptr && !m_verdict) {
        publish(JobVerdict{128 + sig, received(sig, from), std::nullopt, m_plan->layout.node_rank});
      }
      break;
    }
    case Phase::k_finishing:
    case Phase::k_gathering:
      if (is_forwarded_signal(sig)) {
        return;
      }
      m_late_signal = sig;
      if (m_phase == Phase::k_finishing && try_restart()) {
        break;  // the next round, to stop it on every node
      }
      log::info("received {} while the job was ending: exiting now", signal_name(sig));
      end_gathering(std::nullopt);
      return;
    case Phase::k_done:
      return;
  }
  advance();
}

// --preempt-signal received here: every rank of every node gets it and has
// --term-timeout to checkpoint and exit; the job exits 75 on every node.
void Agent::preempt(int sig, bool workers_have_it) {
  const std::string what = node_name() + " received " + signal_name(sig) +
                           (workers_have_it ? " from Slurm" : "") + " (--preempt-signal)";
  if (m_phase == Phase::k_joining) {
    if (m_link == nullptr || !m_link->admitted()) {
      end_early(k_exit_preempted, StopReason::k_preempted, what + " before the workers started",
                false);
      return;
    }
    log::info("{}: the job is preempted on every node before its workers start", what);
    JobVerdict verdict{k_exit_preempted, what + " before the workers started", std::nullopt, -1};
    verdict.preempt = sig;
    verdict.preempt_delivered = workers_have_it;
    publish(verdict);
    return;
  }
  if (m_phase != Phase::k_running || !m_supervisor || m_supervisor->stopping()) {
    log::info("{}: the job is ending already", what);
    return;
  }
  m_preempted_by = what;
  if (workers_have_it) {
    // Slurm signalled every process of the step, on every node it runs on:
    // sent again, a rank's checkpoint handler would run twice (nested).
    log::info(
        "{}, which sent it to every rank of the step too; they have {} s to checkpoint and "
        "exit",
        what, m_config.term_timeout_s);
  } else {
    log::info("{}: sending it to every rank{}; they have {} s to checkpoint and exit", what,
              m_link != nullptr ? " of every node" : "", m_config.term_timeout_s);
  }
  apply(m_supervisor->on_preempt(sig, m_clock.now(), workers_have_it));
  if (m_link != nullptr && !m_verdict) {
    JobVerdict verdict{k_exit_preempted, what, std::nullopt, m_plan->layout.node_rank};
    verdict.preempt = sig;
    verdict.preempt_delivered = workers_have_it;
    publish(verdict);
  }
  advance();
}

}  // namespace ddplaunch
