#include "status/status_codec.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "config/integer.hpp"
#include "config/options.hpp"
#include "output/json_fields.hpp"
#include "output/json_writer.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;
using namespace json_fields;

// --- writing: the fields in nlohmann's order (by name), straight to text ------------
// (reading: status_read.cpp)

void write_lost(JsonWriter& w, const LostNodeStatus& l) {
  w.begin_object();
  w.field("addr", l.addr);
  w.field("host", l.host);
  w.field("node_rank", l.node_rank);
  w.field("round", l.round);
  w.field("time", l.time);
  w.end_object();
}

void write_job(JsonWriter& w, const JobStatus& s) {
  w.begin_object();
  w.field("elapsed_s", s.elapsed_s);
  w.key("lost_nodes");
  w.begin_array();
  for (const LostNodeStatus& l : s.lost_nodes) {
    write_lost(w, l);
  }
  w.end_array();
  w.field("max_restarts", s.max_restarts);
  w.field("nnodes", s.nnodes);
  w.field("nnodes_expected", s.nnodes_expected);
  w.field("restarts", s.restarts);
  w.field("round", s.round);
  w.field("run_id", s.run_id);
  w.field("start_time", s.start_time);
  w.field("tree_fanout", s.tree_fanout);
  w.field("world_size", s.world_size);
  w.end_object();
}

void write_rank(JsonWriter& w, const RankStatus& r) {
  w.begin_object();
  w.field("cpu_percent", r.cpu_percent);
  w.field("cpu_s", r.cpu_s);
  if (r.exit) {
    w.field("exit", *r.exit);
  }
  if (r.gpu_memory_bytes) {
    w.field("gpu_memory_bytes", *r.gpu_memory_bytes);
  }
  w.field("last_line", r.last_line);
  w.field("local_rank", r.local_rank);
  if (r.node_rank >= 0) {
    w.field("node_rank", r.node_rank);
  }
  w.field("pid", r.pid);
  w.field("processes", r.processes);
  w.field("progress_events", r.progress_events);
  w.field("rank", r.rank);
  w.field("rss_kib", r.rss_kib);
  w.field("run_s", r.run_s);
  w.field("since_progress_s", r.since_progress_s);
  w.field("state", r.state);
  w.end_object();
}

void write_ranks(JsonWriter& w, const std::vector<RankStatus>& ranks) {
  w.begin_array();
  for (const RankStatus& r : ranks) {
    write_rank(w, r);
  }
  w.end_array();
}

// A node: its own fields, and with `whole` its job and ranks too (a
// document lists its nodes without them).
void write_node(JsonWriter& w, const NodeStatus& n, bool whole) {
  const bool agent = n.agent_pid.has_value();
  w.begin_object();
  w.field("addr", n.addr);
  if (agent) {
    w.field("agent_cpu_s", n.agent_cpu_s);
    w.field("agent_pid", *n.agent_pid);
    w.field("agent_rss_kib", n.agent_rss_kib);
  }
  w.field("host", n.host);
  if (whole && n.job) {
    w.key("job");
    write_job(w, *n.job);
  }
  if (agent) {
    w.field("local_ranks", n.local_ranks);
  }
  w.field("node_rank", n.node_rank);
  if (whole) {
    w.key("ranks");
    write_ranks(w, n.ranks);
  }
  w.field("round", n.round);
  if (agent) {
    w.field("round_start_time", n.round_start_time);
  }
  w.field("state", n.state);
  w.end_object();
}

}  // namespace

// --- the codec ----------------------------------------------------------------------

std::string encode_node_status(const NodeStatus& node) {
  std::string text;
  text.reserve(512 + 320 * node.ranks.size());
  JsonWriter w(text);
  write_node(w, node, true);
  return text;
}

void encode_status_document(const StatusDocument& doc,
                            const std::function<void(std::string_view)>& sink) {
  constexpr size_t k_piece = 1 << 20;
  std::string text;
  text.reserve(k_piece + 64 * 1024);
  JsonWriter w(text);
  const auto flush = [&](size_t at_least) {
    if (text.size() >= at_least) {
      sink(text);
      text.clear();  // the writer's place is its own, not the text's
    }
  };
  w.begin_object();
  w.key("job");
  if (doc.job) {
    write_job(w, *doc.job);
  } else {
    w.null();
  }
  w.key("missing");
  w.begin_array();
  for (int r : doc.missing) {
    w.value(r);
    flush(k_piece);
  }
  w.end_array();
  w.key("nodes");
  w.begin_array();
  for (const NodeStatus& n : doc.nodes) {
    write_node(w, n, false);
    flush(k_piece);
  }
  w.end_array();
  w.key("ranks");
  w.begin_array();
  for (const RankStatus& r : doc.ranks) {
    write_rank(w, r);
    flush(k_piece);
  }
  w.end_array();
  w.field("request", doc.request);
  w.end_object();
  flush(1);
}

std::string encode_status_document(const StatusDocument& doc) {
  std::string text;
  encode_status_document(doc, [&text](std::string_view piece) { text += piece; });
  return text;
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

StatusDocument merge_status(int64_t n, const std::vector<int>& asked,
                            std::vector<std::optional<NodeStatus>> answers,
                            const std::optional<std::set<int>>& only) {
  StatusDocument doc;
  doc.request = n;
  size_t ranks = 0;
  for (const auto& answer : answers) {
    ranks += answer ? answer->ranks.size() : 0;
  }
  doc.ranks.reserve(ranks);
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
