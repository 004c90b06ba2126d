#include "agent/status_room.hpp"

#include <unistd.h>

#include "status/status_codec.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

StatusRoom::StatusRoom(const RoundView& view, const Config& config, const NodeIdentity& self,
                       const Clock& clock)
    : m_view(view), m_config(config), m_self(self), m_clock(clock) {}

void StatusRoom::on_verdict(const JobVerdict& verdict) {
  if (verdict.lost < 0 || m_lost_nodes.size() >= k_lost_nodes) {
    return;
  }
  const RoundView::Round round = m_view.round();
  LostNodeStatus lost{verdict.lost, "", "", round.round, m_clock.wall_now()};
  if (round.topology && static_cast<size_t>(verdict.lost) < round.topology->nodes.size()) {
    lost.host = round.topology->nodes[static_cast<size_t>(verdict.lost)].host;
    lost.addr = round.topology->nodes[static_cast<size_t>(verdict.lost)].addr;
  }
  m_lost_nodes.push_back(std::move(lost));
}

std::string StatusRoom::answer_text(const std::string& text) const {
  const std::optional<StatusRequest> request = decode_status_request(text);
  const std::optional<NodeStatus> node = request ? answer(*request) : std::nullopt;
  return node ? encode_node_status(*node) : std::string();
}

std::optional<NodeStatus> StatusRoom::answer(const StatusRequest& request) const {
  const RoundView::Round round = m_view.round();
  const bool shown = !request.nodes || request.nodes->contains(round.node_rank);
  if (!shown && round.node_rank != 0) {
    return std::nullopt;
  }
  const auto now = m_clock.now();
  const double wall = m_clock.wall_now();
  // One pass over /proc: the workers' trees, then this agent's own.
  const std::vector<pid_t>& pids = m_view.pids();
  std::vector<pid_t> roots = pids;
  roots.push_back(::getpid());
  const std::vector<ProcessUsage> usage = tree_usage(roots);
  NodeStatus node;
  node.node_rank = round.node_rank;
  node.host = m_self.host;
  node.addr = m_self.addr;
  node.state = std::string(round.state);
  node.agent_pid = ::getpid();
  node.agent_cpu_s = usage.back().cpu_s;
  node.agent_rss_kib = usage.back().rss_kib;
  node.round = round.round;
  node.round_start_time = round.start_time;
  node.local_ranks = static_cast<int>(pids.size());
  if (round.speaks_for_job) {
    node.job = job_status(round, wall);
  }
  // GPU memory by pid where NVML can say (a request's only NVML call).
  const auto gpu = shown && m_gpu_memory ? m_gpu_memory() : std::nullopt;
  for (size_t i = 0; shown && i < pids.size(); ++i) {
    RankStatus r = rank_status(i, usage[i], now, wall, round.start_time);
    if (request.ranks && !request.ranks->contains(r.rank)) {
      continue;
    }
    if (gpu) {
      unsigned long long bytes = 0;
      for (const pid_t pid : usage[i].pids) {
        if (const auto it = gpu->find(pid); it != gpu->end()) {
          bytes += it->second;
        }
      }
      r.gpu_memory_bytes = bytes;
    }
    node.ranks.push_back(std::move(r));
  }
  return node;
}

JobStatus StatusRoom::job_status(const RoundView::Round& round, double wall) const {
  JobStatus job;
  job.run_id = m_config.rdzv_id;
  job.round = round.round;
  job.restarts = round.restarts;
  job.max_restarts = m_config.max_restarts;
  job.nnodes = round.nnodes;
  if (round.topology != nullptr &&
      tree_has_interior_nodes(round.nnodes, round.topology->tree_fanout)) {
    job.tree_fanout = round.topology->tree_fanout;
  }
  job.nnodes_expected =
      m_config.elastic() ? m_config.nnodes_range() : std::to_string(m_config.nnodes);
  job.world_size = round.world_size;
  job.start_time = round.agent_start_time;
  job.elapsed_s = wall - round.agent_start_time;
  job.lost_nodes = m_lost_nodes;
  return job;
}

RankStatus StatusRoom::rank_status(size_t i, const ProcessUsage& usage, Clock::TimePoint now,
                                   double wall, double round_start) const {
  const RoundView::Rank rank = m_view.rank(i);
  RankStatus r;
  r.rank = rank.rank;
  r.local_rank = rank.local_rank;
  r.pid = rank.pid;
  r.run_s = rank.exit && rank.end_time > 0 ? rank.end_time - round_start : wall - round_start;
  r.state = "running";
  if (rank.exit) {
    r.state = rank.exit->success() ? "succeeded" : rank.exit->by_signal() ? "signaled" : "failed";
    r.exit = rank.exit->describe();
  } else if (usage.state == 'T' || usage.state == 't') {
    r.state = "stopped";  // SIGSTOP, or a debugger
  } else if (rank.stopping) {
    r.state = "stopping";
  }
  r.progress_events = rank.progress_events;
  if (!rank.exit) {
    r.since_progress_s = seconds(now - rank.last_progress);
  }
  r.last_line = rank.last_line;
  r.cpu_s = usage.cpu_s;
  r.cpu_percent = r.run_s > 0 ? 100.0 * usage.cpu_s / r.run_s : 0.0;
  r.rss_kib = usage.rss_kib;
  r.processes = usage.processes;
  return r;
}

}  // namespace ddplaunch
