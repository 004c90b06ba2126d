#include "ddplaunch/rendezvous.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "ddplaunch/error.hpp"
#include "ddplaunch/store_client.hpp"
#include "ddplaunch/store_server.hpp"
#include "log.hpp"
#include "posix/net.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
constexpr int k_rdzv_version = 1;
constexpr auto k_progress_every = std::chrono::seconds(5);

Ms ms_of(double seconds) { return Ms(static_cast<long long>(seconds * 1000.0)); }

std::string node_key(int arrival) { return "rdzv/node/" + std::to_string(arrival); }
std::string result_key(int node) { return "job/result/" + std::to_string(node); }
std::string heartbeat_key(int node) { return "job/heartbeat/" + std::to_string(node); }
const char* const k_plan_key = "rdzv/plan";
const char* const k_stop_key = "job/stop";
const char* const k_succeeded_key = "job/succeeded";

// --- verdicts and outcomes as JSON ---------------------------------------------------

json outcome_json(const RankOutcome& o) {
  json j = {{"rank", o.rank},         {"local_rank", o.local_rank}, {"node_rank", o.node_rank},
            {"host", o.host},         {"pid", o.pid},               {"stopped", o.stopped_by_launcher},
            {"start", o.start_time},  {"end", o.end_time},          {"last_stderr", o.last_stderr}};
  if (o.exit) {
    j[o.exit->by_signal() ? "signal" : "code"] = o.exit->by_signal() ? o.exit->signal() : o.exit->code();
  }
  return j;
}

RankOutcome outcome_from(const json& j) {
  RankOutcome o;
  o.rank = j.at("rank");
  o.local_rank = j.at("local_rank");
  o.node_rank = j.at("node_rank");
  o.host = j.at("host");
  o.pid = j.at("pid");
  o.stopped_by_launcher = j.at("stopped");
  o.start_time = j.at("start");
  o.end_time = j.at("end");
  o.last_stderr = j.at("last_stderr").get<std::vector<std::string>>();
  if (j.contains("signal")) {
    o.exit = ExitInfo::signaled(j["signal"]);
  } else if (j.contains("code")) {
    o.exit = ExitInfo::exited(j["code"]);
  }
  return o;
}

std::string verdict_json(const JobVerdict& v) {
  json j = {{"exit_code", v.exit_code}, {"message", v.message}};
  if (v.root_cause) {
    j["root_cause"] = outcome_json(*v.root_cause);
  }
  return j.dump();
}

JobVerdict verdict_from(const std::string& text) {
  auto j = json::parse(text);
  JobVerdict v;
  v.exit_code = j.at("exit_code");
  v.message = j.at("message");
  if (j.contains("root_cause")) {
    v.root_cause = outcome_from(j["root_cause"]);
  }
  return v;
}

// --- the link: heartbeats, the stop watch, results ---------------------------------

class StoreLink : public JobLink {
 public:
  StoreLink(const Config& config, const JobLayout& layout, std::unique_ptr<StoreServer> server,
            StoreClient client, std::vector<std::string> hosts)
      : m_config(config),
        m_layout(layout),
        m_server(std::move(server)),
        m_client(std::move(client)),
        m_watch(config.master_addr, config.master_port, Ms(10'000),
                ms_of(config.heartbeat_timeout_s)),
        m_hosts(std::move(hosts)),
        m_where(config.master_addr + ":" + std::to_string(config.master_port)),
        m_interval(ms_of(config.heartbeat_interval_s)),
        m_next_tick(Clock::now()) {
    m_watch.send_get(k_stop_key);
    m_last_beat.assign(static_cast<size_t>(layout.nnodes), {-1, Clock::now()});
  }

  std::vector<int> fds() const override { return {m_watch.fd()}; }

  std::optional<JobVerdict> on_readable(int) override {
    if (m_watch_done) {
      return std::nullopt;
    }
    m_watch_done = true;
    try {
      return remember(verdict_from(m_watch.read_get()));
    } catch (const StoreError& e) {
      return lost_store(e.what());
    }
  }

  TimePoint next_tick() const override { return m_next_tick; }

  std::optional<JobVerdict> on_tick(TimePoint now) override {
    m_next_tick = now + m_interval;
    if (m_verdict) {
      return std::nullopt;
    }
    try {
      m_client.add(heartbeat_key(m_layout.node_rank), 1);
      if (m_server) {
        return check_heartbeats(now);
      }
    } catch (const StoreError& e) {
      return lost_store(e.what());
    }
    return std::nullopt;
  }

  JobVerdict publish_stop(const JobVerdict& verdict) override {
    try {
      return *remember(verdict_from(m_client.compare_set(k_stop_key, std::nullopt, verdict_json(verdict))));
    } catch (const StoreError& e) {
      log::error("cannot tell the other nodes that the job failed: {}", e.what());
      return *remember(verdict);
    }
  }

  void publish_local_success() override {
    try {
      if (m_client.add(k_succeeded_key, 1) == m_layout.nnodes) {
        m_client.compare_set(k_stop_key, std::nullopt, verdict_json(JobVerdict{}));
      }
    } catch (const StoreError& e) {
      log::error("cannot report success to the store: {}", e.what());
    }
  }

  std::vector<RankOutcome> finish(const std::vector<RankOutcome>& local) override {
    json mine = json::array();
    for (const auto& o : local) {
      mine.push_back(outcome_json(o));
    }
    std::vector<RankOutcome> all = local;
    try {
      m_client.set(result_key(m_layout.node_rank), mine.dump());
      if (!m_server) {
        return all;
      }
      // The store host keeps the store up until every live node has reported (bounded).
      std::vector<std::string> keys;
      for (int n = 0; n < m_layout.nnodes; ++n) {
        if (!m_lost.contains(n)) {
          keys.push_back(result_key(n));
        }
      }
      if (!m_client.wait(keys, ms_of(std::min(m_config.heartbeat_timeout_s, 30.0)))) {
        log::warn("not every node reported its ranks' outcomes before the store shut down");
      }
      all.clear();
      std::vector<std::string> every;
      for (int n = 0; n < m_layout.nnodes; ++n) {
        every.push_back(result_key(n));
      }
      auto values = m_client.multi_get(every);
      for (int n = 0; n < m_layout.nnodes; ++n) {
        const auto& v = values[static_cast<size_t>(n)];
        if (n == m_layout.node_rank || !v) {
          if (n == m_layout.node_rank) {
            all.insert(all.end(), local.begin(), local.end());
          }
          continue;
        }
        for (const auto& j : json::parse(*v)) {
          all.push_back(outcome_from(j));
        }
      }
      std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
    } catch (const StoreError& e) {
      log::debug("store gone while reporting results: {}", e.what());
    }
    return all;
  }

 private:
  std::optional<JobVerdict> remember(JobVerdict v) {
    if (!m_verdict) {
      m_verdict = v;
    }
    return m_verdict;
  }

  std::optional<JobVerdict> lost_store(const std::string& why) {
    return remember(JobVerdict{k_exit_node_lost,
                               "lost contact with the store at " + m_where +
                                   " (node 0's agent exited or its host is unreachable): " + why,
                               std::nullopt});
  }

  // The store host notices nodes whose heartbeat counter stopped moving.
  std::optional<JobVerdict> check_heartbeats(TimePoint now) {
    std::vector<std::string> keys;
    for (int n = 0; n < m_layout.nnodes; ++n) {
      keys.push_back(heartbeat_key(n));
      keys.push_back(result_key(n));
    }
    auto values = m_client.multi_get(keys);
    const auto limit = ms_of(m_config.heartbeat_timeout_s);
    for (int n = 0; n < m_layout.nnodes; ++n) {
      const auto& beat = values[static_cast<size_t>(2 * n)];
      if (values[static_cast<size_t>(2 * n + 1)]) {
        continue;  // it finished and reported
      }
      long long count = beat ? std::stoll(*beat) : 0;
      auto& [last, when] = m_last_beat[static_cast<size_t>(n)];
      if (count != last) {
        last = count;
        when = now;
      } else if (now - when >= limit) {
        m_lost.insert(n);
        JobVerdict v{k_exit_node_lost,
                     "node " + std::to_string(n) + " (" + m_hosts[static_cast<size_t>(n)] +
                         ") was lost: no heartbeat for " +
                         std::to_string(static_cast<int>(m_config.heartbeat_timeout_s)) + " s",
                     std::nullopt};
        return publish_stop(v);  // the verdict in force
      }
    }
    return std::nullopt;
  }

  const Config& m_config;
  JobLayout m_layout;
  std::unique_ptr<StoreServer> m_server;
  StoreClient m_client;
  StoreClient m_watch;
  std::vector<std::string> m_hosts;
  std::string m_where;
  Ms m_interval;
  TimePoint m_next_tick;
  bool m_watch_done = false;
  std::optional<JobVerdict> m_verdict;
  std::vector<std::pair<long long, TimePoint>> m_last_beat;
  std::set<int> m_lost;
};

// --- rendezvous ------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& message) { throw LaunchError(k_exit_rendezvous, message); }

std::unique_ptr<StoreServer> maybe_host_store(const Config& config) {
  const bool explicit_host = config.node_rank == 0;
  if (!explicit_host && (config.node_rank || !posix::is_local_address(config.master_addr))) {
    return nullptr;
  }
  try {
    return std::make_unique<StoreServer>(config.master_addr, config.master_port);
  } catch (const std::system_error& e) {
    if (explicit_host) {
      fail("node 0 cannot host the store: " + std::string(e.what()) +
           "; is another job using --master-port " + std::to_string(config.master_port) +
           "? choose a free port");
    }
    return nullptr;  // another agent on this host got there first: it is node 0
  }
}

std::string describe_node(const json& info, int arrival) {
  std::string who = info.at("node_rank").get<int>() >= 0
                        ? "node " + std::to_string(info.at("node_rank").get<int>())
                        : "the node that joined " + std::to_string(arrival + 1) + "th";
  return who + " (" + info.at("host").get<std::string>() + ", " +
         info.at("addr").get<std::string>() + ")";
}

// Who has not joined yet: the unclaimed node ranks when every node that joined
// gave its rank, else how many (automatic ranks are assigned only at the end).
std::string missing_nodes(const std::vector<json>& infos, int nnodes) {
  std::set<int> claimed;
  bool any_automatic = false;
  for (const auto& i : infos) {
    const int rank = i.at("node_rank").get<int>();
    any_automatic = any_automatic || rank < 0;
    claimed.insert(rank);
  }
  const int count = nnodes - static_cast<int>(infos.size());
  if (any_automatic) {
    return std::to_string(count) + (count == 1 ? " node" : " nodes");
  }
  std::string names;
  for (int n = 0; n < nnodes; ++n) {
    if (!claimed.contains(n)) {
      names += (names.empty() ? "node " : ", node ") + std::to_string(n);
    }
  }
  return names;
}

// The store host collects every node's join record, checks that they agree,
// and publishes the plan (or the reason there is none).
json make_plan(const Config& config, StoreClient& client, const json& self,
               Clock::time_point deadline) {
  std::vector<json> infos;
  auto next_progress = Clock::now() + k_progress_every;
  while (static_cast<int>(infos.size()) < config.nnodes) {
    const int k = static_cast<int>(infos.size());
    auto now = Clock::now();
    if (now >= deadline || client.wait({node_key(k)}, std::max(Ms(1), std::chrono::ceil<Ms>(
                                                           std::min(deadline, next_progress) - now)))) {
      if (!client.check({node_key(k)})) {
        std::string status = std::to_string(infos.size()) + "/" + std::to_string(config.nnodes) +
                             " joined (missing: " + missing_nodes(infos, config.nnodes) + ")";
        return json{{"ok", false},
                    {"error", "rendezvous timed out after " +
                                  std::to_string(static_cast<int>(config.rdzv_timeout_s)) +
                                  " s: " + status + "; start ddplaunch on the missing nodes "
                                  "with the same --master-addr/--master-port"}};
      }
      json info = json::parse(*client.get(node_key(k)));
      const int rank = info.at("node_rank");
      if (info.at("version") != k_rdzv_version) {
        return json{{"ok", false},
                    {"error", describe_node(info, k) + " speaks rendezvous version " +
                                  info.at("version").dump() + ", node 0 version " +
                                  std::to_string(k_rdzv_version) +
                                  "; run the same ddplaunch on every node"}};
      }
      if (info.at("run_id") != self.at("run_id")) {
        return json{{"ok", false},
                    {"error", describe_node(info, k) + " has --rdzv-id " +
                                  info.at("run_id").get<std::string>() + " but node 0 has " +
                                  self.at("run_id").get<std::string>() +
                                  "; give every node the same job id"}};
      }
      if (info.at("nnodes") != config.nnodes) {
        return json{{"ok", false},
                    {"error", describe_node(info, k) + " has --nnodes " +
                                  info.at("nnodes").dump() + " but node 0 has --nnodes " +
                                  std::to_string(config.nnodes) +
                                  "; give every node the same --nnodes"}};
      }
      for (const auto& other : infos) {
        if (rank >= 0 && other.at("node_rank") == rank) {
          return json{{"ok", false},
                      {"error", "node rank " + std::to_string(rank) + " is claimed twice: by " +
                                    describe_node(other, other.at("arrival")) + " and by " +
                                    describe_node(info, k) +
                                    "; give each node its own --node-rank, or use auto"}};
        }
      }
      info["arrival"] = k;
      infos.push_back(info);
      continue;
    }
    now = Clock::now();
    if (now >= next_progress) {
      next_progress = now + k_progress_every;
      log::info("waiting for nodes: {}/{} joined (missing: {})", infos.size(), config.nnodes,
                missing_nodes(infos, config.nnodes));
    }
  }
  // Assign automatic node ranks: the store host is node 0 unless 0 was
  // claimed; the others take the lowest free ranks in order of arrival.
  std::set<int> taken;
  for (const auto& i : infos) {
    if (i.at("node_rank").get<int>() >= 0) {
      taken.insert(i.at("node_rank").get<int>());
    }
  }
  for (auto& i : infos) {
    if (i.at("store_host").get<bool>() && i.at("node_rank").get<int>() < 0 && !taken.contains(0)) {
      i["node_rank"] = 0;
      taken.insert(0);
    }
  }
  int next_free = 0;
  for (auto& i : infos) {
    if (i.at("node_rank").get<int>() < 0) {
      while (taken.contains(next_free)) {
        ++next_free;
      }
      i["node_rank"] = next_free;
      taken.insert(next_free);
    }
  }
  std::sort(infos.begin(), infos.end(),
            [](const json& a, const json& b) { return a.at("node_rank") < b.at("node_rank"); });
  int offset = 0;
  json nodes = json::array();
  for (auto& i : infos) {
    nodes.push_back({{"arrival", i.at("arrival")},
                     {"node_rank", i.at("node_rank")},
                     {"nproc", i.at("nproc")},
                     {"rank_offset", offset},
                     {"host", i.at("host")}});
    offset += i.at("nproc").get<int>();
  }
  int worker_port = config.worker_port.value_or(0);
  if (worker_port == 0) {
    worker_port = posix::pick_free_port();
  }
  return json{{"ok", true},
              {"world_size", offset},
              {"worker_addr", config.master_addr},
              {"worker_port", worker_port},
              {"nodes", nodes}};
}

}  // namespace

RendezvousResult rendezvous(const Config& config, const JobLayout& local) {
  const auto deadline = Clock::now() + ms_of(config.rdzv_timeout_s);
  auto server = maybe_host_store(config);
  const bool is_host = server != nullptr;
  if (is_host) {
    log::debug("hosting the store on {}:{}", config.master_addr, config.master_port);
  }
  std::optional<StoreClient> client;
  try {
    client.emplace(config.master_addr, config.master_port,
                   std::chrono::ceil<Ms>(deadline - Clock::now()), ms_of(config.heartbeat_timeout_s));
  } catch (const StoreError& e) {
    std::string what = e.what();
    if (what.find("version mismatch") != std::string::npos) {
      fail(what);
    }
    fail(what + " within --rdzv-timeout " + std::to_string(static_cast<int>(config.rdzv_timeout_s)) +
         " s; is ddplaunch running on node 0 with the same --master-addr/--master-port?");
  }

  const std::string addr = config.local_addr.empty() ? posix::resolve_numeric(local.hostname)
                                                     : config.local_addr;
  json self = {{"version", k_rdzv_version},
               {"run_id", config.rdzv_id},
               {"nnodes", config.nnodes},
               {"nproc", local.local_world_size},
               {"node_rank", config.node_rank.value_or(-1)},
               {"host", local.hostname},
               {"addr", addr},
               {"store_host", is_host}};
  json plan;
  int arrival = 0;
  try {
    arrival = static_cast<int>(client->add("rdzv/arrivals", 1) - 1);
    client->set(node_key(arrival), self.dump());
    if (is_host) {
      plan = make_plan(config, *client, self, deadline);
      client->set(k_plan_key, plan.dump());
      if (!plan.at("ok").get<bool>()) {
        // Keep the store up until every joined node has read why (bounded).
        std::vector<std::string> acks;
        const auto joined = client->add("rdzv/arrivals", 0);
        for (int64_t a = 0; a < joined; ++a) {
          if (a != arrival) {
            acks.push_back("rdzv/ack/" + std::to_string(a));
          }
        }
        client->wait(acks, Ms(5000));
      }
    } else {
      // A little past our own deadline, so the store host's verdict (which
      // names the missing nodes) reaches us first.
      const auto plan_deadline = deadline + std::chrono::seconds(5);
      auto next_progress = Clock::now();
      while (true) {
        auto now = Clock::now();
        if (now >= plan_deadline) {
          fail("rendezvous timed out after " + std::to_string(static_cast<int>(config.rdzv_timeout_s)) +
               " s: node 0 never published the job's plan; check that every node was started");
        }
        auto got = client->get(k_plan_key, std::max(Ms(1), std::chrono::ceil<Ms>(
                                                              std::min(plan_deadline, now + k_progress_every) - now)));
        if (got) {
          plan = json::parse(*got);
          client->set("rdzv/ack/" + std::to_string(arrival), "1");
          break;
        }
        if (Clock::now() >= next_progress) {
          next_progress = Clock::now() + k_progress_every;
          log::info("waiting for nodes: {}/{} joined", client->add("rdzv/arrivals", 0),
                    config.nnodes);
        }
      }
    }
  } catch (const StoreError& e) {
    throw LaunchError(k_exit_node_lost, std::string("rendezvous failed: ") + e.what());
  }
  if (!plan.at("ok").get<bool>()) {
    fail(plan.at("error").get<std::string>());
  }
  JobLayout layout = local;
  bool found = false;
  std::vector<std::string> hosts;
  for (const auto& n : plan.at("nodes")) {
    hosts.push_back(n.at("host"));
    if (n.at("arrival") == arrival) {
      found = true;
      layout.node_rank = n.at("node_rank");
      layout.rank_offset = n.at("rank_offset");
    }
  }
  if (!found) {
    fail("more agents joined than --nnodes " + std::to_string(config.nnodes) +
         ": this node is not part of the job (is it started twice?)");
  }
  layout.nnodes = config.nnodes;
  layout.world_size = plan.at("world_size");
  layout.master_addr = plan.at("worker_addr");
  layout.master_port = plan.at("worker_port");
  log::debug("joined as node {} of {}: ranks {}..{} of {}", layout.node_rank, layout.nnodes,
             layout.rank_offset, layout.rank_offset + layout.local_world_size - 1, layout.world_size);
  RendezvousResult result;
  result.layout = layout;
  try {
    result.link = std::make_unique<StoreLink>(config, layout, std::move(server), std::move(*client),
                                              std::move(hosts));
  } catch (const StoreError& e) {
    throw LaunchError(k_exit_node_lost, std::string("lost the store after rendezvous: ") + e.what());
  }
  return result;
}

}  // namespace ddplaunch
