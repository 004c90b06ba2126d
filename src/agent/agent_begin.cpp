// A round's start: its plan, what it says, its workers started.
#include <cerrno>
#include <system_error>
#include <utility>

#include "agent/agent.hpp"
#include "config/launch_error.hpp"
#include "env/mpi_env.hpp"
#include "log.hpp"

namespace ddplaunch {

// gloo's and NCCL's interface: the one this node reaches its peers from, once
// their addresses are known (node 0 knows every node's; a member's route to
// node 0 chose its own already), else the one holding its own address. The
// same on every node where the network allows.
std::string Agent::socket_ifname(const Topology& topology, int node_rank) const {
  if (m_self.ifname_towards) {
    for (const auto& node : topology.nodes) {
      if (node.node_rank != node_rank && !node.addr.empty() && node.addr != m_self.addr) {
        if (std::string name = m_self.ifname_towards(node.addr); !name.empty()) {
          return name;
        }
      }
    }
  }
  return m_self.ifname;
}

// The round's layout and each worker's argv and environment (the PMIx
// server's round first, where there is one).
JobLayout Agent::plan_round(const Topology& topology, int node_rank, bool& mpi_round) {
  JobLayout layout =
      layout_of(topology, node_rank, m_config.rdzv_id, m_config.role, m_config.max_restarts);
  layout.restart_count = m_restarts + m_no_progress_restarts;
  layout.round = m_round;
  if (layout.job_id.empty()) {
    layout.job_id = m_self.job_id;  // a plan without one (a placeholder, a fake in tests)
  }
  layout.socket_ifname = socket_ifname(topology, node_rank);
  // With a PMIx server, the round's namespace first: its variables are the
  // same for every worker but one, and go into what they share.
  std::optional<MpiRound::Plan> mpi = m_mpi ? m_mpi->start(topology, layout) : std::nullopt;
  m_plan = mpi ? make_launch_spec(m_config, layout, mpi->worker_env, m_self.bindings,
                                  std::move(mpi->shared))
               : make_launch_spec(m_config, layout, m_env, m_self.bindings);
  for (auto& w : m_plan->workers) {
    w.stdout_tty = m_self.stdout_tty;
  }
  if (mpi) {
    // What mpirun gives each rank before MPI_Init, for programs that look
    // before they call it.
    EnvMap identity;
    for (auto& w : m_plan->workers) {
      w.env.set(mpi->rank_variable, std::to_string(w.rank));
      identity.clear();
      add_open_mpi_identity(identity, layout, w.local_rank);
      for (const auto& [name, value] : identity) {
        w.env.set(name, value);
      }
    }
  }
  mpi_round = mpi.has_value();
  return layout;
}

// What the round's start says: the plan's notices, a filter that matches
// nothing, and with --report-bindings each rank's CPUs, GPUs and interfaces.
void Agent::report_round(const JobLayout& layout, bool mpi) const {
  for (const auto& notice : m_plan->notices) {
    if (m_round == 0) {  // the same each round
      log::info("{}", notice);
    }
  }
  if (m_round == 0 && layout.node_rank == 0) {
    if (auto why = m_config.filter_matches_nothing(layout.world_size, layout.local_world_size)) {
      log::warn("{}", *why);
    }
  }
  if (m_config.report_bindings) {
    if (!layout.socket_ifname.empty()) {
      // The workers' env says which (unless the user set it): say why too.
      log::info("node {}: gloo and NCCL use interface {} ({}){}", layout.node_rank,
                layout.socket_ifname,
                m_config.local_addr.empty() ? "the one this node reaches its peers from"
                                            : "the one holding --local-addr",
                m_env.contains("GLOO_SOCKET_IFNAME") ? "; GLOO_SOCKET_IFNAME set by you wins" : "");
    }
    if (mpi) {
      const OpenMpiHost& host = m_mpi->host();
      log::info("node {}: Open MPI's shared memory uses {} ({}){}", layout.node_rank,
                host.cma ? "single-copy CMA" : "no single-copy mechanism", host.cma_why,
                m_env.contains("OMPI_MCA_btl_vader_single_copy_mechanism")
                    ? "; OMPI_MCA_btl_vader_single_copy_mechanism set by you wins"
                    : "");
      if (host.oversubscribed) {
        log::info(
            "node {}: this host's ranks outnumber the {} CPUs they may use: MPI ranks yield "
            "the CPU while they wait (OMPI_MCA_mpi_yield_when_idle=1){}",
            layout.node_rank, m_self.usable_cpus,
            m_env.contains("OMPI_MCA_mpi_yield_when_idle") ? "; your setting wins" : "");
      }
    }
    for (const auto& w : m_plan->workers) {
      const auto i = static_cast<size_t>(w.local_rank);
      log::info("rank {} (node {}, local rank {}): {}", w.rank, layout.node_rank, w.local_rank,
                i < m_self.bindings.size() ? describe_binding(m_self.bindings[i])
                                           : "CPUs inherited, GPUs inherited");
    }
  }
}

// Starts the round's workers; false when they could not be (the error is
// pending, and published to the other nodes).
bool Agent::spawn_round(const JobLayout& layout, int node_rank) {
  log::debug("starting {} worker(s) for ranks {}..{} of {}", m_plan->workers.size(),
             layout.rank_offset, layout.rank_offset + layout.local_world_size - 1,
             layout.world_size);
  try {
    m_router.start(layout);
    m_error_files.start(m_router.log_dir(), layout);
    for (auto& w : m_plan->workers) {
      // Each rank its own (torchrun's rule); the launcher's own, if it
      // inherited one, receives the root cause's error at the end.
      if (std::string path = m_error_files.path(w.local_rank); !path.empty()) {
        w.env.set("TORCHELASTIC_ERROR_FILE", path);
      } else {
        w.env.erase("TORCHELASTIC_ERROR_FILE");
      }
    }
    m_start_time = m_clock.wall_now();
    m_pids = m_spawner.spawn(m_plan->workers);
  } catch (const LaunchError& e) {
    // A bad --log-dir (2) or a program that cannot be executed (127) here
    // ends the job on every node.
    m_phase = Phase::k_running;
    m_pending_error = std::make_pair(e.exit_code(), std::string(e.what()));
    if (m_link != nullptr) {
      publish(JobVerdict{e.exit_code(), node_name() + ": " + e.what(), std::nullopt, node_rank});
    }
    return false;
  } catch (const std::exception& e) {
    // The system refused something (pipes or processes past a limit): an
    // internal error here, published like the above so no node waits for a
    // heartbeat timeout to learn of it.
    std::string what = e.what();
    if (const auto* se = dynamic_cast<const std::system_error*>(&e);
        se != nullptr && (se->code().value() == EMFILE || se->code().value() == ENFILE)) {
      what += "; raise the open-file limit (ulimit -n) or start fewer workers on this node";
    }
    m_phase = Phase::k_running;
    m_pending_error = std::make_pair(k_exit_internal, what);
    if (m_link != nullptr) {
      publish(JobVerdict{k_exit_internal, node_name() + " could not start its workers: " + what,
                         std::nullopt, node_rank});
    }
    return false;
  }
  return true;
}

void Agent::begin(const Topology& topology, int node_rank) {
  m_topology = topology;
  m_round_progress = 0;
  m_progress_frozen = false;
  m_progress_reported = false;
  bool mpi = false;
  const JobLayout layout = plan_round(topology, node_rank, mpi);
  report_round(layout, mpi);
  if (!spawn_round(layout, node_rank)) {
    return;
  }
  m_end_times.assign(m_pids.size(), 0);
  m_last_progress.assign(m_pids.size(), m_clock.now());
  m_progress_writes.assign(m_pids.size(), 0);
  m_streams_paused.assign(m_pids.size(), 0);
  m_paused_since.assign(m_pids.size(), TimePoint{});
  m_hung.reset();
  m_supervisor.emplace(static_cast<int>(m_pids.size()), millis(m_config.term_timeout_s));
  m_phase = Phase::k_running;
  tell(&RoundObserver::on_round_start);
}

}  // namespace ddplaunch
