#include "status/stacks_codec.hpp"

#include <nlohmann/json.hpp>

#include "output/json_fields.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;
using namespace json_fields;

// At most this many ranks, and processes a rank, are read from one answer:
// a forged answer cannot grow a screen without bound.
constexpr size_t k_max_ranks = 1 << 16;
constexpr size_t k_max_processes = 64;

template <class T>
void read_array(const json& j, const char* key, std::vector<T>& out, size_t max) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return;
  }
  if (!it->is_array()) {
    throw json::type_error::create(302, std::string(key) + " is not an array", nullptr);
  }
  for (size_t i = 0; i < it->size() && i < max; ++i) {
    out.push_back((*it)[i].get<T>());
  }
}

}  // namespace

// --- nlohmann's hooks: each field's JSON name, written once ----------------------

void to_json(json& j, const ProcessStacks& p) {
  j = {{"pid", p.pid}, {"exe", p.exe}, {"tool", p.tool}, {"stacks", p.stacks}};
  if (!p.note.empty()) {
    j["note"] = p.note;
  }
}

void from_json(const json& j, ProcessStacks& p) {
  expect_object(j, "a process");
  read(j, "pid", p.pid);
  read(j, "exe", p.exe);
  read(j, "tool", p.tool);
  read(j, "stacks", p.stacks);
  read(j, "note", p.note);
}

void to_json(json& j, const RankStacks& r) {
  j = {{"rank", r.rank}, {"local_rank", r.local_rank}, {"pid", r.pid}};
  if (r.node_rank >= 0) {
    j["node_rank"] = r.node_rank;
  }
  if (!r.ended.empty()) {
    j["ended"] = r.ended;
  }
  j["processes"] = r.processes;
}

void from_json(const json& j, RankStacks& r) {
  expect_object(j, "a rank");
  read(j, "rank", r.rank);
  read(j, "local_rank", r.local_rank);
  read(j, "node_rank", r.node_rank);
  read(j, "pid", r.pid);
  read(j, "ended", r.ended);
  read_array(j, "processes", r.processes, k_max_processes);
}

namespace {

// A node's own fields (its ranks and the job travel beside them).
json node_fields(const NodeStacks& n) {
  return {{"node_rank", n.node_rank}, {"host", n.host}, {"round", n.round}};
}

json job_of(const std::optional<int>& nnodes) {
  return nnodes ? json{{"nnodes", *nnodes}} : json(nullptr);
}

std::optional<int> read_job(const json& j) {
  const auto it = j.find("job");
  if (it == j.end() || it->is_null()) {
    return std::nullopt;
  }
  expect_object(*it, "the job");
  std::optional<int> nnodes;
  read(*it, "nnodes", nnodes);
  return nnodes;
}

}  // namespace

void to_json(json& j, const NodeStacks& n) {
  j = node_fields(n);
  if (n.job_nnodes) {
    j["job"] = job_of(n.job_nnodes);
  }
  j["ranks"] = n.ranks;
}

void from_json(const json& j, NodeStacks& n) {
  expect_object(j, "a node");
  read(j, "node_rank", n.node_rank);
  read(j, "host", n.host);
  read(j, "round", n.round);
  n.job_nnodes = read_job(j);
  read_array(j, "ranks", n.ranks, k_max_ranks);
}

// --- the codec ----------------------------------------------------------------------

std::string encode_node_stacks(const NodeStacks& node) {
  return json_text(json(node));
}

std::optional<NodeStacks> decode_node_stacks(std::string_view text) {
  return decode_record<NodeStacks>(text);
}

std::string encode_stacks_document(const StacksDocument& doc) {
  json nodes = json::array();
  for (const NodeStacks& n : doc.nodes) {
    nodes.push_back(node_fields(n));
  }
  return json_text({{"request", doc.request},
                    {"job", job_of(doc.job_nnodes)},
                    {"nodes", std::move(nodes)},
                    {"ranks", doc.ranks},
                    {"missing", doc.missing}});
}

std::optional<StacksDocument> decode_stacks_document(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    return std::nullopt;
  }
  try {
    StacksDocument doc;
    read(j, "request", doc.request);
    doc.job_nnodes = read_job(j);
    read_array(j, "nodes", doc.nodes, k_max_ranks);
    read_array(j, "ranks", doc.ranks, k_max_ranks);
    read(j, "missing", doc.missing);
    return doc;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

StacksDocument merge_stacks(int64_t n, const std::vector<int>& asked,
                            const std::vector<std::optional<std::string>>& answers,
                            const std::optional<std::set<int>>& only) {
  StacksDocument doc;
  doc.request = n;
  for (size_t k = 0; k < asked.size() && k < answers.size(); ++k) {
    const int r = asked[k];
    std::optional<NodeStacks> answer = answers[k] ? decode_node_stacks(*answers[k]) : std::nullopt;
    if (!answer) {
      doc.missing.push_back(r);
      continue;
    }
    if (answer->job_nnodes) {
      doc.job_nnodes = answer->job_nnodes;
      answer->job_nnodes.reset();
    }
    if (only && !only->contains(r)) {
      continue;  // node 0, asked for the job's size only
    }
    for (RankStacks& rank : answer->ranks) {
      rank.node_rank = r;
      doc.ranks.push_back(std::move(rank));
    }
    answer->ranks.clear();
    doc.nodes.push_back(std::move(*answer));
  }
  return doc;
}

}  // namespace ddplaunch
