// The Agent's answer to `ddplaunch status` (docs/STATUS.md): this node, its
// ranks as they are now, and on node 0 the job. Built on request only, on
// the agent's thread. Part of agent.hpp's Agent.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "agent/agent.hpp"
#include "config/options.hpp"
#include "log.hpp"
#include "node/process_usage.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;

// The filter's members; nullopt for none (everything).
std::optional<std::set<int>> filter(const json& request, const char* name) {
  const auto it = request.find(name);
  if (it == request.end() || !it->is_string() || it->get<std::string>().empty()) {
    return std::nullopt;
  }
  return parse_rank_list(it->get<std::string>(), name);
}

const char* phase_name(bool done, bool running, bool joining) {
  return done ? "ending" : running ? "running" : joining ? "joining" : "stopping";
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

std::string Agent::status_record(const std::string& request_text) const {
  json request = json::parse(request_text, nullptr, false);
  std::optional<std::set<int>> ranks;
  std::optional<std::set<int>> nodes;
  try {
    ranks = request.is_object() ? filter(request, "ranks") : std::nullopt;
    nodes = request.is_object() ? filter(request, "nodes") : std::nullopt;
  } catch (const std::exception& e) {
    log::debug("a status request with a bad filter: {}", e.what());
    return {};
  }
  const int node_rank = m_plan ? m_plan->layout.node_rank : -1;
  // Node 0 always answers: it alone knows the job's size.
  const bool shown = !nodes || nodes->contains(node_rank);
  if (!shown && node_rank != 0) {
    return {};
  }
  const auto now = m_clock.now();
  const double wall = m_clock.wall_now();
  // One pass over /proc: the workers' trees, then this agent's own.
  std::vector<pid_t> roots = m_pids;
  roots.push_back(::getpid());
  const std::vector<ProcessUsage> usage = tree_usage(roots);
  const ProcessUsage& agent = usage.back();
  json node = {{"node_rank", node_rank},
               {"host", m_self.host},
               {"addr", m_self.addr},
               {"state", phase_name(m_phase == Phase::k_done || m_phase == Phase::k_gathering,
                                    m_phase == Phase::k_running, m_phase == Phase::k_joining)},
               {"agent_pid", ::getpid()},
               {"agent_cpu_s", agent.cpu_s},
               {"agent_rss_kib", agent.rss_kib},
               {"round", m_round},
               {"round_start_time", m_start_time},
               {"local_ranks", m_pids.size()}};
  if (node_rank == 0 || m_link == nullptr) {
    node["job"] = {{"run_id", m_config.rdzv_id},
                   {"round", m_round},
                   {"restarts", m_restarts},
                   {"max_restarts", m_config.max_restarts},
                   {"nnodes", m_plan ? m_plan->layout.nnodes : 0},
                   {"nnodes_expected",
                    m_config.elastic() ? m_config.nnodes_range() : std::to_string(m_config.nnodes)},
                   {"world_size", m_plan ? m_plan->layout.world_size : 0},
                   {"start_time", m_agent_began},
                   {"elapsed_s", wall - m_agent_began}};
  }
  json out = json::array();
  for (size_t i = 0; shown && i < m_pids.size() && m_plan && i < m_plan->workers.size(); ++i) {
    const int rank = m_plan->workers[i].rank;
    if (ranks && !ranks->contains(rank)) {
      continue;
    }
    const auto exit = m_supervisor ? m_supervisor->exit_of(static_cast<int>(i)) : std::nullopt;
    const OutputRouter::Activity act = m_router.activity(static_cast<int>(i));
    auto last = i < m_last_progress.size() ? m_last_progress[i] : now;
    if (act.last_at && *act.last_at > last) {
      last = *act.last_at;
    }
    const double run_s =
        exit && m_end_times[i] > 0 ? m_end_times[i] - m_start_time : wall - m_start_time;
    std::string state = "running";
    if (exit) {
      state = exit->success() ? "succeeded" : exit->by_signal() ? "signaled" : "failed";
    } else if (usage[i].state == 'T' || usage[i].state == 't') {
      state = "stopped";  // SIGSTOP, or a debugger
    } else if (m_phase != Phase::k_running || (m_supervisor && m_supervisor->stopping())) {
      state = "stopping";
    }
    json r = {
        {"rank", rank},
        {"local_rank", i},
        {"pid", m_pids[i]},
        {"state", state},
        {"run_s", run_s},
        {"progress_events", act.lines + (i < m_progress_writes.size() ? m_progress_writes[i] : 0)},
        {"since_progress_s", exit ? json(nullptr) : json(seconds(now - last))},
        {"last_line", act.last_line},
        {"cpu_s", usage[i].cpu_s},
        {"cpu_percent", run_s > 0 ? 100.0 * usage[i].cpu_s / run_s : 0.0},
        {"rss_kib", usage[i].rss_kib},
        {"processes", usage[i].processes}};
    if (exit) {
      r["exit"] = exit->describe();
    }
    out.push_back(std::move(r));
  }
  node["ranks"] = std::move(out);
  return node.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ddplaunch
