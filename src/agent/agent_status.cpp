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

// A request's filters: false when one is bad (no answer).
bool filters_of(const std::string& text, json& request, std::optional<std::set<int>>& ranks,
                std::optional<std::set<int>>& nodes) {
  request = json::parse(text, nullptr, false);
  try {
    ranks = request.is_object() ? filter(request, "ranks") : std::nullopt;
    nodes = request.is_object() ? filter(request, "nodes") : std::nullopt;
  } catch (const std::exception& e) {
    log::debug("a status request with a bad filter: {}", e.what());
    return false;
  }
  return true;
}

}  // namespace

void Agent::stacks_request(const std::string& text, StatusResponder::Reply reply) {
  json request;
  std::optional<std::set<int>> ranks;
  std::optional<std::set<int>> nodes;
  if (!filters_of(text, request, ranks, nodes)) {
    return;
  }
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
  const auto timeout = request.is_object() && request.value("timeout_s", json()).is_number()
                           ? request["timeout_s"].get<double>()
                           : 30.0;
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
  LostNode lost{node_rank, "", "", m_round, m_clock.wall_now()};
  if (m_topology && static_cast<size_t>(node_rank) < m_topology->nodes.size()) {
    lost.host = m_topology->nodes[static_cast<size_t>(node_rank)].host;
    lost.addr = m_topology->nodes[static_cast<size_t>(node_rank)].addr;
  }
  m_lost_nodes.push_back(std::move(lost));
}

std::string Agent::status_record(const std::string& request_text) const {
  json request;
  std::optional<std::set<int>> ranks;
  std::optional<std::set<int>> nodes;
  if (!filters_of(request_text, request, ranks, nodes)) {
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
    json lost = json::array();
    for (const LostNode& l : m_lost_nodes) {
      lost.push_back({{"node_rank", l.node_rank},
                      {"host", l.host},
                      {"addr", l.addr},
                      {"round", l.round},
                      {"time", l.time}});
    }
    node["job"]["lost_nodes"] = std::move(lost);
  }
  // GPU memory by pid where NVML can say (a request's only NVML call).
  const auto gpu = shown && m_gpu_memory ? m_gpu_memory() : std::nullopt;
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
    if (gpu) {
      unsigned long long bytes = 0;
      for (const pid_t pid : usage[i].pids) {
        if (const auto it = gpu->find(pid); it != gpu->end()) {
          bytes += it->second;
        }
      }
      r["gpu_memory_bytes"] = bytes;
    }
    out.push_back(std::move(r));
  }
  node["ranks"] = std::move(out);
  return node.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ddplaunch
