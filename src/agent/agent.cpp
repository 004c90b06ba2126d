#include "agent/agent.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <system_error>
#include <utility>

#include "agent/python_stacks.hpp"
#include "config/launch_error.hpp"
#include "log.hpp"
#include "output/report_json.hpp"
#include "proc/spawn.hpp"
#include "supervise/hang_stacks.hpp"
#include "supervise/signal_policy.hpp"

namespace ddplaunch {

Agent::Agent(const Config& config, const EnvMap& env, NodeIdentity self, Spawner& spawner,
             const Clock& clock, JobLink* link, ConsoleSink& console, MpiRanks* mpi)
    : m_config(config),
      m_env(env),
      m_self(std::move(self)),
      m_spawner(spawner),
      m_clock(clock),
      m_link(link),
      m_router(config, console, &clock),
      m_error_files(m_self.job_dir) {
  if (mpi != nullptr) {
    m_mpi.emplace(*mpi, m_env, m_self);
  }
}

std::string Agent::node_name() const {
  if (m_plan) {
    return "node " + std::to_string(m_plan->layout.node_rank) + " (" + m_self.host + ")";
  }
  if (m_config.node_rank) {
    return "node " + std::to_string(*m_config.node_rank) + " (" + m_self.host + ")";
  }
  return "the node on " + m_self.host;
}

std::optional<int> Agent::node_rank() const {
  if (m_plan) {
    return m_plan->layout.node_rank;
  }
  return m_config.node_rank;
}

void Agent::start() {
  m_start_time = m_clock.wall_now();
  m_agent_began = m_start_time;
  tell(&RoundObserver::on_agent_start);
  if (m_link == nullptr) {
    const int port = m_config.worker_port.value_or(m_self.free_port);
    Topology t =
        uniform_topology(1, m_self.nproc, 0, m_self.host, m_self.addr, m_config.master_addr, port);
    t.job_id = m_self.job_id;
    for (size_t w = 0; w < m_self.worker_ports.size() && w < t.nodes[0].workers.size(); ++w) {
      t.nodes[0].workers[w].port = m_self.worker_ports[w];
    }
    begin(t, 0);
    advance();
    return;
  }
  JoinRecord self;
  self.run_id = m_config.rdzv_id;
  self.argv.push_back(m_config.program);
  self.argv.insert(self.argv.end(), m_config.program_args.begin(), m_config.program_args.end());
  self.nnodes = m_config.nnodes;
  self.nnodes_min = m_config.elastic() ? m_config.nnodes_min : 0;
  self.nproc = m_self.nproc;
  self.node_rank = m_config.node_rank.value_or(-1);
  self.host = m_self.host;
  self.addr = m_self.addr;
  self.ports = m_self.worker_ports;
  self.max_restarts = m_config.max_restarts;
  self.health = m_self.health;
  self.probe_port = m_self.probe_port;
  self.job_id = m_self.job_id;
  self.tree_fanout = m_config.tree_fanout;
  self.restart_min_progress = m_config.restart_min_progress;
  self.max_no_progress_restarts = m_config.max_no_progress_restarts;
  tell(&RoundObserver::on_rendezvous_start);
  m_link->join(self);
}

void Agent::apply(const Supervisor::Actions& actions) {
  for (const auto& a : actions.signals) {
    m_spawner.signal(a.local_rank, a.sig);
  }
  if (actions.local_failure) {
    // A local rank is the root cause: the other nodes hear it through the store.
    RankOutcome root = root_outcome(*m_supervisor->root_cause());
    log::debug("rank {} failed first: {}", root.rank, root.exit ? root.exit->describe() : "");
    if (m_link != nullptr && !m_verdict) {
      JobVerdict verdict{m_supervisor->exit_code(), "", root, m_plan->layout.node_rank};
      if (m_config.progress_restarts()) {
        verdict.progress = made_progress() ? 1 : 0;  // the link asks the other nodes too
      }
      publish(verdict);
    }
  }
}

void Agent::publish(const JobVerdict& verdict) {
  m_published_stop = true;
  m_publish_deadline = m_clock.now() + k_publish_wait;
  m_link->publish_stop(verdict);
}

RankOutcome Agent::outcome(int local_rank) const {
  const auto i = static_cast<size_t>(local_rank);
  RankOutcome o;
  o.rank = m_plan->workers.at(i).rank;
  o.local_rank = local_rank;
  o.node_rank = m_plan->layout.node_rank;
  o.host = m_plan->layout.hostname;
  o.pid = m_pids.at(i);
  o.exit = m_supervisor->exit_of(local_rank);
  o.stopped_by_launcher = m_supervisor->stopped_by_launcher(local_rank);
  o.start_time = m_start_time;
  o.end_time = m_end_times.at(i);
  if (m_hung) {
    for (const auto& [lr, seconds] : m_hung->ranks) {
      if (lr == local_rank) {
        o.hung_for_s = seconds;
        o.stack = main_thread_stack(m_router.stderr_tail(local_rank));
      }
    }
  }
  o.preempted = m_supervisor->reason() == StopReason::k_preempted && o.exit && o.exit->success();
  return o;
}

std::vector<RankOutcome> Agent::outcomes() const {
  std::vector<RankOutcome> local;
  local.reserve(m_pids.size());
  for (int lr = 0; lr < static_cast<int>(m_pids.size()); ++lr) {
    local.push_back(outcome(lr));
    if (failed_by_itself(local.back())) {
      local.back().last_stderr = m_router.stderr_tail(lr);
    }
  }
  keep_fold_tails(local);
  return local;
}

RankOutcome Agent::root_outcome(int local_rank) const {
  RankOutcome o = outcome(local_rank);
  o.last_stderr = m_router.stderr_tail(local_rank);
  if (o.last_stderr.size() > k_report_lines) {  // a hung rank's stacks: the end has its main thread
    o.last_stderr.erase(o.last_stderr.begin(), o.last_stderr.end() - k_report_lines);
  }
  if (auto text = m_error_files.read(local_rank)) {
    o.error = decode_error_file(*text);
    if (!o.error) {
      log::debug("rank {}'s error file is not PyTorch's format: not shown", o.rank);
    }
  }
  if (!o.error) {
    o.error = m_mpi ? m_mpi->error(local_rank, m_clock.wall_now()) : std::nullopt;
  }
  return o;
}

void Agent::on_worker_exit(int local_rank, const ExitInfo& info) {
  if (!m_supervisor || m_phase == Phase::k_done) {
    return;
  }
  m_end_times.at(static_cast<size_t>(local_rank)) = m_clock.wall_now();
  log::debug("local rank {} ended: {}", local_rank, info.describe());
  tell(&RoundObserver::on_rank_exit, local_rank, info);
  const ExitInfo counted = m_mpi ? m_mpi->exit(local_rank, info, m_supervisor->stopping()) : info;
  apply(m_supervisor->on_worker_exit(local_rank, counted, m_clock.now()));
  advance();
}

void Agent::on_output_closed(int local_rank, Stream stream) {
  m_router.on_close(local_rank, stream);
  advance();
}

void Agent::on_time() {
  const auto now = m_clock.now();
  note_progress();
  check_hangs(now);
  if (m_supervisor && m_phase == Phase::k_running) {
    if (auto d = m_supervisor->deadline(); d && now >= *d) {
      const auto actions = m_supervisor->on_deadline(now);
      if (!actions.local_failure && !actions.signals.empty()) {
        log::warn("workers still running {} s after {}: sending SIGKILL", m_config.term_timeout_s,
                  signal_name(m_supervisor->stop_signal().value_or(SIGTERM)));
      }
      apply(actions);
    }
  }
  advance();
}

std::optional<Agent::TimePoint> Agent::next_deadline() const {
  const auto now = m_clock.now();
  std::optional<TimePoint> first;
  auto consider = [&](std::optional<TimePoint> t) {
    if (t && (!first || *t < *first)) {
      first = t;
    }
  };
  if (m_phase == Phase::k_running && m_supervisor) {
    consider(m_supervisor->deadline());
    if (auto h = hang_deadline(); h && *h != TimePoint::max()) {
      consider(h);
    }
  }
  if (m_publish_deadline && !m_verdict && now < *m_publish_deadline) {
    consider(m_publish_deadline);
  }
  if (m_phase == Phase::k_finishing) {
    consider(m_drain_deadline);
    consider(m_sweep_at);
  }
  if (m_pending_error && m_report_deadline) {
    consider(m_report_deadline);
  }
  return first;
}

void Agent::on_joined(const Topology& topology, int node_rank, const RoundStart& round) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  m_round = round.round;  // a node admitted to a running elastic job starts late
  m_restarts = round.restarts;
  m_no_progress = round.no_progress;
  m_replaced = round.replaced;
  tell(&RoundObserver::on_joined, topology, node_rank, round);
  if (m_join_signal) {
    m_topology = topology;  // stopping already: no worker starts
    advance();
    return;
  }
  log::debug("joined as node {} of {}", node_rank, topology.nnodes());
  begin(topology, node_rank);
  advance();
}

void Agent::on_not_needed(int exit_code, const std::string& message) {
  if (m_phase == Phase::k_joining) {
    log::info("{}", message);
    end_early(exit_code, StopReason::k_none, message, false);
  }
}

void Agent::on_join_failed(int exit_code, const std::string& message) {
  if (m_phase == Phase::k_joining && !m_join_signal) {
    // This node's own failed health check is what refused it (or the job).
    // Under a launching command node 0 says why the job did not start; the
    // others keep to their exit code (one line, not one per node).
    const bool nodes_0s_word = m_config.launcher_channel && m_config.node_rank.value_or(0) != 0;
    if (nodes_0s_word) {
      log::debug("{}", message);
    }
    end_early(m_self.health.empty() ? exit_code : k_exit_unhealthy, StopReason::k_none, message,
              !nodes_0s_word);
  } else if (m_phase == Phase::k_joining) {
    advance();
  }
}

void Agent::on_verdict(const JobVerdict& verdict) {
  if (m_verdict || m_phase == Phase::k_done) {
    return;
  }
  m_verdict = verdict;
  tell(&RoundObserver::on_verdict, verdict);
  if (m_phase == Phase::k_joining && !m_join_signal) {
    // Another node stopped the job before it started.
    m_summary.root_cause = verdict.root_cause;
    end_early(verdict.exit_code, StopReason::k_remote, verdict.message, false);
    return;
  }
  if (m_phase == Phase::k_running && m_supervisor && verdict.preempt > 0) {
    if (!m_supervisor->stopping()) {
      log::info("{}: {} to every rank here; they have {} s to checkpoint and exit", verdict.message,
                verdict.preempt_delivered
                    ? "Slurm sent " + std::string(signal_name(verdict.preempt))
                    : "sending " + std::string(signal_name(verdict.preempt)),
                m_config.term_timeout_s);
    }
    apply(m_supervisor->on_preempt(verdict.preempt, m_clock.now(), verdict.preempt_delivered));
  } else if (m_phase == Phase::k_running && m_supervisor && !verdict.success()) {
    if (m_supervisor->reason() == StopReason::k_signal && m_supervisor->stop_signal() &&
        !m_late_signal && verdict.exit_code != 128 + *m_supervisor->stop_signal()) {
      // This node's stop lost the race to another verdict (a failure that
      // restarts the job, say): its signal is kept as one that came late, so
      // a restart goes on only to stop the next round on every node, and it
      // still decides this node's exit code.
      m_late_signal = m_supervisor->stop_signal();
    }
    if (verdict.root_cause && verdict.root_cause->hung_for_s > 0 && !m_supervisor->stopping() &&
        !m_hung && m_config.hang_timeout_s > 0) {
      // The job hung: this node's stacks may hold the rank to blame.
      take_hung_stacks(
          m_clock.now(),
          fmt::format("node {} found the job hung (rank {} without progress for "
                      "{:.1f} s)",
                      verdict.node, verdict.root_cause->rank, verdict.root_cause->hung_for_s));
    }
    apply(m_supervisor->on_remote_stop(verdict.exit_code, m_clock.now()));
  }
  advance();
}

void Agent::on_finished(std::vector<RankOutcome> ranks) {
  m_gathered = std::move(ranks);
  advance();
}

void Agent::advance() {
  if (m_advancing) {
    m_again = true;
    return;
  }
  m_advancing = true;
  do {
    m_again = false;
    const Phase before = m_phase;
    step();
    m_again = m_again || m_phase != before;
  } while (m_again && m_phase != Phase::k_done);
  m_advancing = false;
}

void Agent::step() {
  const auto now = m_clock.now();
  const bool confirmation_overdue =
      m_published_stop && !m_verdict && m_publish_deadline && now >= *m_publish_deadline;
  if (m_pending_error) {
    step_failed_start(now, confirmation_overdue);
    return;
  }
  switch (m_phase) {
    case Phase::k_joining:
      if (m_join_signal && (m_verdict || confirmation_overdue)) {
        if (m_verdict && m_verdict->exit_code != 128 + *m_join_signal) {
          m_summary.root_cause = m_verdict->root_cause;  // another node stopped it first
          end_early(m_verdict->exit_code, StopReason::k_remote, m_verdict->message, false);
        } else {
          end_early(128 + *m_join_signal, StopReason::k_signal, "", false);
        }
      }
      return;
    case Phase::k_running: {
      if (!m_supervisor->finished()) {
        return;
      }
      if (m_link != nullptr && !m_supervisor->stopping() && !m_verdict && !m_published_success) {
        m_published_success = true;
        m_link->publish_success();
      }
      if (m_link == nullptr || m_verdict) {
        start_finishing();
      } else if (confirmation_overdue) {
        log::warn("the store did not confirm this node's verdict within {} ms; ending with it",
                  k_publish_wait.count());
        start_finishing();
      }
      return;
    }
    case Phase::k_finishing:
      step_finishing(now);
      return;
    case Phase::k_gathering:
      if (m_gathered) {
        end_gathering(std::move(m_gathered));
      }
      return;
    case Phase::k_done:
      return;
  }
}

void Agent::step_failed_start(TimePoint now, bool confirmation_overdue) {
  if (m_link != nullptr && m_verdict && !m_report_deadline) {
    // No rank of this node ran: say so at once, so the store host does not
    // wait for this node's results until the heartbeat timeout.
    m_report_deadline = now + k_publish_wait;
    m_link->finish({});
    return;
  }
  const bool reported = m_gathered || (m_report_deadline && now >= *m_report_deadline);
  if (m_link == nullptr || reported || confirmation_overdue) {
    end_early(m_pending_error->first, StopReason::k_none, m_pending_error->second, true);
  }
}

void Agent::step_finishing(TimePoint now) {
  if (m_sweep_at && now >= *m_sweep_at && !m_router.all_closed()) {
    // Pipes still held open: by processes that escaped deeper than
    // kill_all()'s sweep reaches. Killed by the job's marker, they let
    // go of them now, not at the drain deadline.
    m_sweep_at.reset();
    int killed = 0;
    m_spawner.reclaim(std::chrono::milliseconds(0), killed);
    m_swept += killed;  // reported with the restart's own count
  }
  if (m_router.all_closed() || now >= *m_drain_deadline) {
    if (try_restart()) {
      return;
    }
    if (m_swept > 0) {
      log::info("killed {} process{} the workers left behind holding their output", m_swept,
                m_swept == 1 ? "" : "es");
    }
    const std::vector<RankOutcome> local = outcomes();
    if (m_link != nullptr && m_verdict && !m_late_signal) {
      m_phase = Phase::k_gathering;
      m_link->finish(local);
    } else {
      if (m_link != nullptr) {
        m_link->finish(local);  // sent, not awaited: the store did not answer in time
      }
      end_gathering(std::nullopt);
    }
  }
}

}  // namespace ddplaunch
