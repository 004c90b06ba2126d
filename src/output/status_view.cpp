#include "output/status_view.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

namespace ddplaunch {

namespace {

using json = nlohmann::json;

// `text` with every control character but newline and tab as '?'.
std::string printable(std::string text) {
  for (char& c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      c = '?';
    }
  }
  return text;
}

std::string stacks_text(const json& doc) {
  std::vector<json> ranks(doc["ranks"].begin(), doc["ranks"].end());
  std::stable_sort(ranks.begin(), ranks.end(), [](const json& a, const json& b) {
    return a.value("rank", -1) < b.value("rank", -1);
  });
  std::map<int, std::string> hosts;
  for (const auto& n : doc["nodes"]) {
    hosts[n.value("node_rank", -1)] = n.value("host", "");
  }
  std::string out;
  for (const auto& r : ranks) {
    const int node = r.value("node_rank", -1);
    out += printable(fmt::format("=== rank {} (node {}, {}, pid {})", r.value("rank", -1), node,
                                 hosts[node], r.value("pid", 0)));
    if (const std::string ended = r.value("ended", ""); !ended.empty()) {
      out += printable(": " + ended + "\n");
      continue;
    }
    out += " ===\n";
    const json processes = r.value("processes", json::array());
    if (!processes.is_array() || processes.empty()) {
      out += "(no process left to look at)\n";
    }
    for (const auto& p : processes) {
      out += printable(fmt::format("--- pid {} {} ({})\n", p.value("pid", 0), p.value("exe", ""),
                                   p.value("tool", "none")));
      std::string stacks = printable(p.value("stacks", ""));
      if (!stacks.empty() && stacks.back() != '\n') {
        stacks += '\n';
      }
      out += stacks;
      if (const std::string note = p.value("note", ""); !note.empty()) {
        out += printable("note: " + note + "\n");
      }
    }
  }
  for (const auto& m : doc["missing"]) {
    out += fmt::format("node {} did not answer in time (lost, stopped or unreachable)\n",
                       m.get<int>());
  }
  if (ranks.empty() && doc["missing"].empty()) {
    out += "no rank to show: the job runs none here yet, or --ranks/--nodes chose none\n";
  }
  return out;
}

}  // namespace

std::string format_stacks(const std::string& text) {
  const json doc = json::parse(text, nullptr, false);
  if (!doc.is_object()) {
    return "stacks: no answer could be read\n";
  }
  try {
    return stacks_text(doc);
  } catch (const json::exception&) {
    return "stacks: an answer held a field of the wrong type\n";
  }
}

std::string stacks_document(int64_t n, const std::vector<int>& asked,
                            const std::vector<std::optional<std::string>>& answers,
                            const std::optional<std::set<int>>& only) {
  json doc = {{"request", n},
              {"job", nullptr},
              {"nodes", json::array()},
              {"ranks", json::array()},
              {"missing", json::array()}};
  // An answer is whatever was written under its key (the workers'
  // credential may write there too): anything but the shapes expected is
  // left out, never trusted.
  for (size_t k = 0; k < asked.size() && k < answers.size(); ++k) {
    const int r = asked[k];
    json answer = answers[k] ? json::parse(*answers[k], nullptr, false) : json();
    if (!answer.is_object()) {
      doc["missing"].push_back(r);
      continue;
    }
    if (const auto job = answer.find("job"); job != answer.end() && job->is_object()) {
      doc["job"] = *job;
    }
    if (only && !only->contains(r)) {
      continue;  // node 0, asked for the job's size only
    }
    if (const auto ranks = answer.find("ranks"); ranks != answer.end() && ranks->is_array()) {
      for (auto rank : *ranks) {
        if (rank.is_object()) {
          rank["node_rank"] = r;
          doc["ranks"].push_back(std::move(rank));
        }
      }
    }
    answer.erase("ranks");
    answer.erase("job");
    doc["nodes"].push_back(std::move(answer));
  }
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ddplaunch
