// The Agent's answer to `ddplaunch status` (docs/STATUS.md): this node, its
// ranks as they are now, and on node 0 the job. Built on request only, on
// the agent's thread. Part of agent.hpp's Agent.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "agent/agent.hpp"
#include "config/options.hpp"
#include "log.hpp"
#include "node/process_usage.hpp"
#include "status/status_codec.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;

const char* phase_name(bool done, bool running, bool joining) {
  return done ? "ending" : running ? "running" : joining ? "joining" : "stopping";
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

void Agent::stacks_request(const std::string& text, StatusResponder::Reply reply) {
  const std::optional<StatusRequest> request = decode_status_request(text);
  if (!request) {
    log::debug("a stacks request that is not one: {}", text);
    return;
  }
  const auto& ranks = request->ranks;
  const auto& nodes = request->nodes;
  const int node_rank = m_plan ? m_plan->layout.node_rank : -1;
  const bool shown = !nodes || nodes->contains(node_rank);
  if (!shown && node_rank != 0) {
    return;  // node 0 always answers: it alone knows the job's size
  }
  json head = {{"node_rank", node_rank}, {"host", m_self.host}, {"round", m_round}};
  if (node_rank == 0 || m_link == nullptr) {
    head["job"] = {{"nnodes", m_plan ? m_plan->layout.nnodes : 0}};
  }
  std::vector<StackCapture::Target> targets;
  const std::vector<ProcessUsage> usage = shown ? tree_usage(m_pids) : std::vector<ProcessUsage>();
  for (size_t i = 0; i < usage.size() && m_plan && i < m_plan->workers.size(); ++i) {
    const int rank = m_plan->workers[i].rank;
    if (ranks && !ranks->contains(rank)) {
      continue;
    }
    StackCapture::Target t{rank, static_cast<int>(i), m_pids[i], "", usage[i].pids};
    if (auto exit = m_supervisor ? m_supervisor->exit_of(static_cast<int>(i)) : std::nullopt) {
      t.ended = exit->describe();
    }
    targets.push_back(std::move(t));
  }
  // The command waits --timeout for the answers: this node gives its own a
  // little before, with what it has by then.
  const double timeout = request->timeout_s;
  const auto margin = std::chrono::milliseconds(500);
  const auto wait = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::duration<double>(std::clamp(timeout, 0.1, 86400.0))) -
                                 margin,
                             std::chrono::milliseconds(100));
  m_stacks.capture(head.dump(), std::move(targets), m_clock.now() + wait,
                   [reply = std::move(reply)](const std::string& record) { reply(record); });
}

void Agent::remember_lost_node(int node_rank) {
  if (m_lost_nodes.size() >= 1024) {
    return;
  }
  LostNodeStatus lost{node_rank, "", "", m_round, m_clock.wall_now()};
  if (m_topology && static_cast<size_t>(node_rank) < m_topology->nodes.size()) {
    lost.host = m_topology->nodes[static_cast<size_t>(node_rank)].host;
    lost.addr = m_topology->nodes[static_cast<size_t>(node_rank)].addr;
  }
  m_lost_nodes.push_back(std::move(lost));
}

std::optional<NodeStatus> Agent::status(const StatusRequest& request) const {
  const auto& ranks = request.ranks;
  const int node_rank = m_plan ? m_plan->layout.node_rank : -1;
  // Node 0 always answers: it alone knows the job's size.
  const bool shown = !request.nodes || request.nodes->contains(node_rank);
  if (!shown && node_rank != 0) {
    return std::nullopt;
  }
  const auto now = m_clock.now();
  const double wall = m_clock.wall_now();
  // One pass over /proc: the workers' trees, then this agent's own.
  std::vector<pid_t> roots = m_pids;
  roots.push_back(::getpid());
  const std::vector<ProcessUsage> usage = tree_usage(roots);
  const ProcessUsage& agent = usage.back();
  NodeStatus node;
  node.node_rank = node_rank;
  node.host = m_self.host;
  node.addr = m_self.addr;
  node.state = phase_name(m_phase == Phase::k_done || m_phase == Phase::k_gathering,
                          m_phase == Phase::k_running, m_phase == Phase::k_joining);
  node.agent_pid = ::getpid();
  node.agent_cpu_s = agent.cpu_s;
  node.agent_rss_kib = agent.rss_kib;
  node.round = m_round;
  node.round_start_time = m_start_time;
  node.local_ranks = static_cast<int>(m_pids.size());
  if (node_rank == 0 || m_link == nullptr) {
    node.job = job_status(wall);
  }
  // GPU memory by pid where NVML can say (a request's only NVML call).
  const auto gpu = shown && m_gpu_memory ? m_gpu_memory() : std::nullopt;
  for (size_t i = 0; shown && i < m_pids.size() && m_plan && i < m_plan->workers.size(); ++i) {
    if (!ranks || ranks->contains(m_plan->workers[i].rank)) {
      node.ranks.push_back(rank_status(i, usage[i], now, wall));
      if (gpu) {
        unsigned long long bytes = 0;
        for (const pid_t pid : usage[i].pids) {
          if (const auto it = gpu->find(pid); it != gpu->end()) {
            bytes += it->second;
          }
        }
        node.ranks.back().gpu_memory_bytes = bytes;
      }
    }
  }
  return node;
}

JobStatus Agent::job_status(double wall) const {
  JobStatus job;
  job.run_id = m_config.rdzv_id;
  job.round = m_round;
  job.restarts = m_restarts;
  job.max_restarts = m_config.max_restarts;
  job.nnodes = m_plan ? m_plan->layout.nnodes : 0;
  job.nnodes_expected =
      m_config.elastic() ? m_config.nnodes_range() : std::to_string(m_config.nnodes);
  job.world_size = m_plan ? m_plan->layout.world_size : 0;
  job.start_time = m_agent_began;
  job.elapsed_s = wall - m_agent_began;
  job.lost_nodes = m_lost_nodes;
  return job;
}

RankStatus Agent::rank_status(size_t i, const ProcessUsage& usage, TimePoint now,
                              double wall) const {
  const auto exit = m_supervisor ? m_supervisor->exit_of(static_cast<int>(i)) : std::nullopt;
  const OutputRouter::Activity act = m_router.activity(static_cast<int>(i));
  const TimePoint last = i < m_last_progress.size() ? last_progress(i) : now;
  RankStatus r;
  r.rank = m_plan->workers[i].rank;
  r.local_rank = static_cast<int>(i);
  r.pid = m_pids[i];
  r.run_s = exit && m_end_times[i] > 0 ? m_end_times[i] - m_start_time : wall - m_start_time;
  r.state = "running";
  if (exit) {
    r.state = exit->success() ? "succeeded" : exit->by_signal() ? "signaled" : "failed";
    r.exit = exit->describe();
  } else if (usage.state == 'T' || usage.state == 't') {
    r.state = "stopped";  // SIGSTOP, or a debugger
  } else if (m_phase != Phase::k_running || (m_supervisor && m_supervisor->stopping())) {
    r.state = "stopping";
  }
  r.progress_events = act.lines + (i < m_progress_writes.size() ? m_progress_writes[i] : 0);
  if (!exit) {
    r.since_progress_s = seconds(now - last);
  }
  r.last_line = act.last_line;
  r.cpu_s = usage.cpu_s;
  r.cpu_percent = r.run_s > 0 ? 100.0 * usage.cpu_s / r.run_s : 0.0;
  r.rss_kib = usage.rss_kib;
  r.processes = usage.processes;
  return r;
}

}  // namespace ddplaunch
