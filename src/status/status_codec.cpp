#include "status/status_codec.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "config/integer.hpp"
#include "config/options.hpp"
#include "output/json_fields.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;
using namespace json_fields;

}  // namespace

// --- nlohmann's hooks: each field's JSON name, written once ----------------------

void to_json(json& j, const LostNodeStatus& l) {
  j = {{"node_rank", l.node_rank},
       {"host", l.host},
       {"addr", l.addr},
       {"round", l.round},
       {"time", l.time}};
}

void from_json(const json& j, LostNodeStatus& l) {
  expect_object(j, "a lost node");
  read(j, "node_rank", l.node_rank);
  read(j, "host", l.host);
  read(j, "addr", l.addr);
  read(j, "round", l.round);
  read(j, "time", l.time);
}

void to_json(json& j, const JobStatus& s) {
  j = {{"run_id", s.run_id},         {"round", s.round},
       {"restarts", s.restarts},     {"max_restarts", s.max_restarts},
       {"nnodes", s.nnodes},         {"nnodes_expected", s.nnodes_expected},
       {"world_size", s.world_size}, {"start_time", s.start_time},
       {"elapsed_s", s.elapsed_s},   {"lost_nodes", s.lost_nodes}};
}

void from_json(const json& j, JobStatus& s) {
  expect_object(j, "the job");
  read(j, "run_id", s.run_id);
  read(j, "round", s.round);
  read(j, "restarts", s.restarts);
  read(j, "max_restarts", s.max_restarts);
  read(j, "nnodes", s.nnodes);
  read(j, "nnodes_expected", s.nnodes_expected);
  read(j, "world_size", s.world_size);
  read(j, "start_time", s.start_time);
  read(j, "elapsed_s", s.elapsed_s);
  // At most 1,024 lost nodes are read: a forged answer cannot grow a screen.
  if (const auto it = j.find("lost_nodes"); it != j.end() && it->is_array()) {
    for (size_t i = 0; i < it->size() && i < 1024; ++i) {
      s.lost_nodes.push_back((*it)[i].get<LostNodeStatus>());
    }
  }
}

void to_json(json& j, const RankStatus& r) {
  j = {{"rank", r.rank},
       {"local_rank", r.local_rank},
       {"pid", r.pid},
       {"state", r.state},
       {"run_s", r.run_s},
       {"progress_events", r.progress_events},
       {"since_progress_s", r.since_progress_s ? json(*r.since_progress_s) : json(nullptr)},
       {"last_line", r.last_line},
       {"cpu_s", r.cpu_s},
       {"cpu_percent", r.cpu_percent},
       {"rss_kib", r.rss_kib},
       {"processes", r.processes}};
  if (r.node_rank >= 0) {
    j["node_rank"] = r.node_rank;
  }
  write(j, "exit", r.exit);
  write(j, "gpu_memory_bytes", r.gpu_memory_bytes);
}

void from_json(const json& j, RankStatus& r) {
  expect_object(j, "a rank");
  read(j, "rank", r.rank);
  read(j, "local_rank", r.local_rank);
  read(j, "node_rank", r.node_rank);
  read(j, "pid", r.pid);
  read(j, "state", r.state);
  read(j, "run_s", r.run_s);
  read(j, "progress_events", r.progress_events);
  read(j, "since_progress_s", r.since_progress_s);
  read(j, "last_line", r.last_line);
  read(j, "cpu_s", r.cpu_s);
  read(j, "cpu_percent", r.cpu_percent);
  read(j, "rss_kib", r.rss_kib);
  read(j, "processes", r.processes);
  read(j, "exit", r.exit);
  read(j, "gpu_memory_bytes", r.gpu_memory_bytes);
}

// A node's own fields (its ranks and the job travel beside them).
void node_fields(json& j, const NodeStatus& n) {
  j["node_rank"] = n.node_rank;
  j["host"] = n.host;
  j["addr"] = n.addr;
  j["state"] = n.state;
  j["round"] = n.round;
  if (n.agent_pid) {
    j["agent_pid"] = *n.agent_pid;
    j["agent_cpu_s"] = n.agent_cpu_s;
    j["agent_rss_kib"] = n.agent_rss_kib;
    j["round_start_time"] = n.round_start_time;
    j["local_ranks"] = n.local_ranks;
  }
}

void to_json(json& j, const NodeStatus& n) {
  j = json::object();
  node_fields(j, n);
  if (n.job) {
    j["job"] = *n.job;
  }
  j["ranks"] = n.ranks;
}

void from_json(const json& j, NodeStatus& n) {
  expect_object(j, "a node");
  read(j, "node_rank", n.node_rank);
  read(j, "host", n.host);
  read(j, "addr", n.addr);
  read(j, "state", n.state);
  read(j, "agent_pid", n.agent_pid);
  read(j, "agent_cpu_s", n.agent_cpu_s);
  read(j, "agent_rss_kib", n.agent_rss_kib);
  read(j, "round", n.round);
  read(j, "round_start_time", n.round_start_time);
  read(j, "local_ranks", n.local_ranks);
  if (const auto it = j.find("job"); it != j.end() && !it->is_null()) {
    n.job = it->get<JobStatus>();
  }
  if (const auto it = j.find("ranks"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) {
      throw json::type_error::create(302, "ranks is not an array", nullptr);
    }
    n.ranks = it->get<std::vector<RankStatus>>();
  }
}

// --- the codec ----------------------------------------------------------------------

std::string encode_node_status(const NodeStatus& node) {
  return json_text(json(node));
}

std::optional<NodeStatus> decode_node_status(std::string_view text) {
  return decode_record<NodeStatus>(text);
}

std::string encode_status_document(const StatusDocument& doc) {
  json nodes = json::array();
  for (const NodeStatus& n : doc.nodes) {
    json node = json::object();
    node_fields(node, n);
    nodes.push_back(std::move(node));
  }
  return json_text({{"request", doc.request},
                    {"job", doc.job ? json(*doc.job) : json(nullptr)},
                    {"nodes", std::move(nodes)},
                    {"ranks", doc.ranks},
                    {"missing", doc.missing}});
}

std::optional<StatusDocument> decode_status_document(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    return std::nullopt;
  }
  try {
    StatusDocument doc;
    read(j, "request", doc.request);
    if (const auto it = j.find("job"); it != j.end() && !it->is_null()) {
      doc.job = it->get<JobStatus>();
    }
    read(j, "nodes", doc.nodes);
    read(j, "ranks", doc.ranks);
    read(j, "missing", doc.missing);
    return doc;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::string encode_status_request(const StatusRequest& request) {
  auto ranges = [](const std::optional<std::set<int>>& set) {
    return set ? format_ranges(std::vector<int>(set->begin(), set->end())) : std::string();
  };
  return json_text({{"ranks", ranges(request.ranks)},
                    {"nodes", ranges(request.nodes)},
                    {"timeout_s", request.timeout_s}});
}

std::optional<StatusRequest> decode_status_request(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    return std::nullopt;
  }
  StatusRequest request;
  try {
    for (auto [name, set] :
         {std::pair("ranks", &request.ranks), std::pair("nodes", &request.nodes)}) {
      std::string list;
      read(j, name, list);
      if (!list.empty()) {
        *set = parse_rank_list(list, name);
      }
    }
    read(j, "timeout_s", request.timeout_s);
  } catch (const std::exception&) {
    return std::nullopt;  // a filter that is not a rank list, a field of the wrong type
  }
  return request;
}

std::optional<int> answered_nnodes(std::string_view answer) {
  const json head = json::parse(answer, nullptr, false);
  const json job = head.is_object() ? head.value("job", json()) : json();
  const auto count = job.is_object() ? job.find("nnodes") : job.end();
  if (count == job.end() || !count->is_number_integer()) {
    return std::nullopt;
  }
  return static_cast<int>(std::clamp<int64_t>(count->get<int64_t>(), -1, 1 << 30));
}

std::vector<std::optional<NodeStatus>> decode_answers(
    const std::vector<std::optional<std::string>>& answers) {
  std::vector<std::optional<NodeStatus>> out;
  out.reserve(answers.size());
  for (const auto& a : answers) {
    out.push_back(a ? decode_node_status(*a) : std::nullopt);
  }
  return out;
}

StatusDocument merge_status(int64_t n, const std::vector<int>& asked,
                            std::vector<std::optional<NodeStatus>> answers,
                            const std::optional<std::set<int>>& only) {
  StatusDocument doc;
  doc.request = n;
  for (size_t k = 0; k < asked.size() && k < answers.size(); ++k) {
    const int r = asked[k];
    std::optional<NodeStatus>& answer = answers[k];
    if (!answer) {
      doc.missing.push_back(r);
      continue;
    }
    if (answer->job) {
      doc.job = std::move(answer->job);
      answer->job.reset();
    }
    if (only && !only->contains(r)) {
      continue;  // node 0, asked for the job's size only
    }
    for (RankStatus& rank : answer->ranks) {
      rank.node_rank = r;
      doc.ranks.push_back(std::move(rank));
    }
    answer->ranks.clear();
    doc.nodes.push_back(std::move(*answer));
  }
  // The nodes the job lost (node 0's list), as nodes in the "lost" state:
  // the rank they had in the round they were lost in.
  for (const LostNodeStatus& l : doc.job ? doc.job->lost_nodes : std::vector<LostNodeStatus>()) {
    if (only && !only->contains(l.node_rank)) {
      continue;
    }
    NodeStatus node;
    node.node_rank = l.node_rank;
    node.state = "lost";
    node.host = l.host;
    node.addr = l.addr;
    node.round = l.round;
    doc.nodes.push_back(std::move(node));
  }
  return doc;
}

}  // namespace ddplaunch
