#include "rendezvous/records.hpp"

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>

#include "cluster/nodelist.hpp"
#include "config/config.hpp"
#include "config/launch_error.hpp"
#include "output/json_fields.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;

// Parses `text` and runs `read` over it; any JSON error is a RecordError.
template <typename F>
auto parse_record(std::string_view text, const char* what, F&& read) {
  try {
    return read(json::parse(text));
  } catch (const json::exception& e) {
    throw RecordError(std::string("malformed ") + what + " record: " + e.what());
  }
}

std::vector<int> ints_of(const json& j) {
  if (!j.is_array()) {
    throw RecordError("malformed record: " + j.dump().substr(0, 40) + " is not a list of integers");
  }
  std::vector<int> out;
  for (const auto& v : j) {
    out.push_back(json_int(v));
  }
  return out;
}

// Node sizes, run-length: [[nproc, count], ...].
json sizes_json(const std::vector<SizeRun>& sizes) {
  json j = json::array();
  for (const auto& run : sizes) {
    j.push_back(json::array({run.nproc, run.count}));
  }
  return j;
}

// The longest host list a plan carries: every node reads the plan, and
// names that do not fold into ranges would make it grow with the job.
constexpr size_t k_max_host_list = 16 * 1024;

// The plan's topology: what every node reads, so that its size does not
// grow with the node count. The node sizes run-length ([[nproc, count], ...]);
// when workers reserve ports (TF_CONFIG lists every worker), every node as
// [node_rank, host, addr, nproc, first_rank, [port by local rank]];
// otherwise every node's host name, in Slurm's host-list syntax, where that
// is short ("gpu[001-128]": the PMIx servers' node map).
json plan_topology_json(const Topology& t) {
  json j = {{"world_size", t.world_size},
            {"master_addr", t.master_addr},
            {"master_port", t.master_port},
            {"sizes", sizes_json(t.sizes)}};
  if (!t.job_id.empty()) {
    j["job"] = t.job_id;
  }
  j["tree"] = t.tree_fanout;
  const bool ports = std::any_of(t.nodes.begin(), t.nodes.end(), [](const NodeEntry& n) {
    return std::any_of(n.workers.begin(), n.workers.end(),
                       [](const WorkerSlot& w) { return w.port != 0; });
  });
  if (ports && t.complete()) {
    json nodes = json::array();
    for (const auto& n : t.nodes) {
      json port_list = json::array();
      for (const auto& w : n.workers) {
        port_list.push_back(w.port);
      }
      nodes.push_back(json::array({n.node_rank, n.host, n.addr, n.nproc, n.first_rank, port_list}));
    }
    j["nodes"] = nodes;
  } else if (t.complete() && t.nodes.size() > 1) {
    std::vector<std::string> names;
    for (const auto& n : t.nodes) {
      names.push_back(n.host);
    }
    if (std::string list = compress_nodelist(names);
        !list.empty() && list.size() <= k_max_host_list) {
      j["hosts"] = std::move(list);
    }
  }
  return j;
}

Topology plan_topology_from(const json& j) {
  Topology t;
  t.world_size = json_int(j.at("world_size"));
  t.master_addr = j.at("master_addr").get<std::string>();
  t.master_port = json_int(j.at("master_port"));
  if (j.contains("job")) {
    t.job_id = j.at("job").get<std::string>();
    if (t.job_id.size() > 64) {
      throw RecordError("malformed plan record: its job id is over 64 bytes");
    }
  }
  if (j.contains("tree")) {
    t.tree_fanout = json_int(j.at("tree"));
    if (t.tree_fanout < Config::k_min_tree_fanout || t.tree_fanout > Config::k_max_tree_fanout) {
      throw RecordError("malformed plan record: its tree fan-out is out of range");
    }
  }
  long long nodes = 0, ranks = 0;
  for (const auto& run : j.at("sizes")) {
    if (!run.is_array() || run.size() != 2) {
      throw RecordError("malformed plan record: a size is not [nproc, count]");
    }
    SizeRun r{json_int(run.at(0)), json_int(run.at(1))};
    if (r.nproc < 1 || r.count < 1) {
      throw RecordError("malformed plan record: a size is not positive");
    }
    nodes += r.count;
    ranks += static_cast<long long>(r.nproc) * r.count;
    if (nodes > INT_MAX || ranks > t.world_size) {
      throw RecordError("malformed plan record: the node sizes do not fit the world size");
    }
    t.sizes.push_back(r);
  }
  if (ranks != t.world_size || nodes == 0) {
    throw RecordError("malformed plan record: the node sizes do not add up to the world size");
  }
  if (j.contains("hosts")) {
    std::string list = j.at("hosts").get<std::string>();
    size_t count = 0;
    try {
      count = count_nodelist(list);  // checked, not expanded: see Topology::host_list
    } catch (const UsageError&) {
      throw RecordError("malformed plan record: its host list is not a host list");
    }
    if (static_cast<long long>(count) != nodes) {
      throw RecordError("malformed plan record: its host list has not one name per node");
    }
    t.host_list = std::move(list);
  }
  if (!j.contains("nodes")) {
    return t;
  }
  const json& list = j.at("nodes");
  if (!list.is_array() || static_cast<long long>(list.size()) != nodes) {
    throw RecordError("malformed plan record: not one entry per node");
  }
  for (const auto& n : list) {
    if (!n.is_array() || n.size() != 6) {
      throw RecordError(
          "malformed plan record: a node is not [rank, host, addr, nproc, first_rank, ports]");
    }
    const int rank = static_cast<int>(t.nodes.size());
    NodeEntry e = entry_from_sizes(t.sizes, rank);
    if (json_int(n.at(0)) != rank || json_int(n.at(3)) != e.nproc ||
        json_int(n.at(4)) != e.first_rank) {
      throw RecordError("malformed plan record: node " + std::to_string(rank) +
                        "'s entry does not match the node sizes");
    }
    e.host = n.at(1).get<std::string>();
    e.addr = n.at(2).get<std::string>();
    const std::vector<int> ports = ints_of(n.at(5));
    if (ports.size() != static_cast<size_t>(e.nproc)) {
      throw RecordError("malformed plan record: node " + std::to_string(rank) +
                        " has not one port per worker");
    }
    for (size_t lr = 0; lr < ports.size(); ++lr) {
      e.workers[lr].port = ports[lr];
    }
    t.nodes.push_back(std::move(e));
  }
  return t;
}

}  // namespace

std::string encode_join(const JoinRecord& r) {
  return json_text({{"version", r.version},
                    {"run_id", r.run_id},
                    {"argv", r.argv},
                    {"nnodes", r.nnodes},
                    {"nnodes_min", r.nnodes_min},
                    {"nproc", r.nproc},
                    {"node_rank", r.node_rank},
                    {"host", r.host},
                    {"addr", r.addr},
                    {"ports", r.ports},
                    {"store_host", r.store_host},
                    {"arrival", r.arrival},
                    {"max_restarts", r.max_restarts},
                    {"health", r.health},
                    {"restart_min_progress", r.restart_min_progress},
                    {"max_no_progress_restarts", r.max_no_progress_restarts},
                    {"probe_port", r.probe_port}});
}

JoinRecord decode_join(std::string_view text) {
  return parse_record(text, "join", [](const json& j) {
    JoinRecord r;
    r.version = json_int(j.at("version"));
    r.run_id = j.at("run_id").get<std::string>();
    r.argv = j.at("argv").get<std::vector<std::string>>();
    r.nnodes = json_int(j.at("nnodes"));
    r.nnodes_min = j.contains("nnodes_min") ? json_int(j.at("nnodes_min")) : 0;
    r.nproc = json_int(j.at("nproc"));
    r.node_rank = json_int(j.at("node_rank"));
    r.host = j.at("host").get<std::string>();
    r.addr = j.at("addr").get<std::string>();
    r.ports = ints_of(j.at("ports"));
    r.store_host = j.at("store_host").get<bool>();
    r.arrival = json_int(j.at("arrival"));
    r.max_restarts = json_int(j.at("max_restarts"));
    r.health = j.value("health", std::string());
    r.restart_min_progress =
        j.contains("restart_min_progress") ? json_int(j.at("restart_min_progress")) : 0;
    r.max_no_progress_restarts =
        j.contains("max_no_progress_restarts") ? json_int(j.at("max_no_progress_restarts")) : 3;
    r.probe_port = j.contains("probe_port") ? json_int(j.at("probe_port")) : 0;
    if (r.probe_port < 0 || r.probe_port > 65535) {
      throw RecordError("malformed join record: a probe port outside 0-65535");
    }
    return r;
  });
}

std::string encode_plan(const TopologyRecord& r) {
  if (!r.topology) {
    return json_text({{"ok", false}, {"error", r.error}});
  }
  json j = {{"ok", true}, {"topology", plan_topology_json(*r.topology)}};
  if (r.restarts > 0) {
    j["restarts"] = r.restarts;
  }
  if (r.no_progress > 0) {
    j["no_progress"] = r.no_progress;
  }
  if (r.preflight) {
    j["preflight"] = true;
  }
  if (r.stop_cleared) {
    j["stop_cleared"] = true;
  }
  if (!r.replaced.empty()) {
    json replaced = json::array();
    for (const auto& x : r.replaced) {
      replaced.push_back(json::array({x.node_rank, x.lost, x.spare}));
    }
    j["replaced"] = std::move(replaced);
  }
  return json_text(j);
}

TopologyRecord decode_plan(std::string_view text) {
  return parse_record(text, "plan", [](const json& j) {
    TopologyRecord r;
    if (!j.at("ok").get<bool>()) {
      r.error = j.at("error").get<std::string>();
      return r;
    }
    r.topology = plan_topology_from(j.at("topology"));
    r.restarts = j.contains("restarts") ? json_int(j.at("restarts")) : 0;
    r.no_progress = j.contains("no_progress") ? json_int(j.at("no_progress")) : 0;
    r.preflight = j.contains("preflight") && j.at("preflight").get<bool>();
    r.stop_cleared = j.contains("stop_cleared") && j.at("stop_cleared").get<bool>();
    if (j.contains("replaced")) {
      for (const auto& x : j.at("replaced")) {
        if (!x.is_array() || x.size() != 3) {
          throw RecordError("malformed plan record: a replacement is not [rank, lost, spare]");
        }
        r.replaced.push_back(NodeReplacement{json_int(x.at(0)), x.at(1).get<std::string>(),
                                             x.at(2).get<std::string>()});
      }
    }
    if (r.restarts < 0 || r.no_progress < 0) {
      throw RecordError("malformed plan record: a negative restart count");
    }
    return r;
  });
}

std::string encode_probe_endpoint(const ProbeEndpoint& e) {
  return json_text(
      {{"host", e.host}, {"addr", e.addr}, {"port", e.port}, {"master_port", e.master_port}});
}

ProbeEndpoint decode_probe_endpoint(std::string_view text) {
  return parse_record(text, "probe", [](const json& j) {
    ProbeEndpoint e;
    e.host = j.at("host").get<std::string>();
    e.addr = j.at("addr").get<std::string>();
    e.port = json_int(j.at("port"));
    e.master_port = json_int(j.at("master_port"));
    if (e.port < 0 || e.port > 65535 || e.master_port < 0 || e.master_port > 65535) {
      throw RecordError("malformed probe record: a port outside 0-65535");
    }
    return e;
  });
}

std::string encode_probe_report(const ProbeReport& report) {
  if (report.more > 0) {
    return json_text({{"blocked", report.blocked}, {"more", report.more}});
  }
  return json_text({{"blocked", report.blocked}});
}

ProbeReport decode_probe_report(std::string_view text) {
  return parse_record(text, "probe report", [](const json& j) {
    ProbeReport r;
    r.blocked = j.at("blocked").get<std::vector<std::string>>();
    if (j.contains("more")) {
      r.more = json_int(j.at("more"));
      if (r.more < 0) {
        throw RecordError("malformed probe report: a negative count of more paths");
      }
    }
    if (r.blocked.size() > ProbeReport::k_report_lines) {
      throw RecordError("malformed probe report: more than " +
                        std::to_string(ProbeReport::k_report_lines) + " lines");
    }
    return r;
  });
}

void add_to_report(ProbeReport& into, const std::vector<std::string>& lines, long long more) {
  for (const auto& line : lines) {
    if (into.blocked.size() < ProbeReport::k_report_lines) {
      into.blocked.push_back(line);
    } else {
      ++into.more;
    }
  }
  into.more += more;
}

std::string encode_admission(const Admission& a) {
  if (!a.error.empty()) {
    if (a.job_exit >= 0) {
      return json_text({{"error", a.error}, {"exit", a.job_exit}});
    }
    return json_text({{"error", a.error}});
  }
  return json_text({{"round", a.round}});
}

Admission decode_admission(std::string_view text) {
  return parse_record(text, "admission", [](const json& j) {
    Admission a;
    if (j.contains("error")) {
      a.error = j.at("error").get<std::string>();
      if (a.error.empty()) {
        throw RecordError("malformed admission record: an empty error");
      }
      if (j.contains("exit")) {
        a.job_exit = json_int(j.at("exit"));
        if (a.job_exit < 0 || a.job_exit > 255) {
          throw RecordError("malformed admission record: exit code " + std::to_string(a.job_exit));
        }
      }
      return a;
    }
    a.round = json_int(j.at("round"));
    if (a.round < 1) {
      throw RecordError("malformed admission record: round " + std::to_string(a.round));
    }
    return a;
  });
}

std::string encode_answer(const JoinAnswer& a) {
  if (!a.error.empty()) {
    return json_text({{"error", a.error}});
  }
  if (a.wait) {
    return a.spare ? json_text({{"wait", true}, {"spare", true}}) : json_text({{"wait", true}});
  }
  return encode_assignment(a.node_rank);
}

JoinAnswer decode_answer(std::string_view text) {
  return parse_record(text, "node plan", [](const json& j) {
    JoinAnswer a;
    if (j.contains("error")) {
      a.error = j.at("error").get<std::string>();
      if (a.error.empty()) {
        throw RecordError("malformed node plan record: an empty error");
      }
    } else if (j.contains("wait")) {
      a.wait = j.at("wait").get<bool>();
      if (!a.wait) {
        throw RecordError("malformed node plan record: wait is false");
      }
      a.spare = j.contains("spare") && j.at("spare").get<bool>();
    } else {
      a.node_rank = json_int(j.at("node_rank"));
      if (a.node_rank < 0) {
        throw RecordError("malformed node plan record: node rank " + std::to_string(a.node_rank));
      }
    }
    return a;
  });
}

std::string encode_assignment(int node_rank) {
  return json_text({{"node_rank", node_rank}});
}

int decode_assignment(std::string_view text) {
  return parse_record(text, "node plan", [](const json& j) { return json_int(j.at("node_rank")); });
}

std::string encode_verdict(const JobVerdict& v) {
  json j = {{"exit_code", v.exit_code}, {"message", v.message}, {"node", v.node}, {"lost", v.lost}};
  if (v.regroup) {
    j["regroup"] = true;
  }
  if (v.progress >= 0) {
    j["progress"] = v.progress;
  }
  if (v.preempt > 0) {
    j["preempt"] = v.preempt;
  }
  if (v.preempt_delivered) {
    j["preempt_delivered"] = true;
  }
  j["root_cause"] = v.root_cause ? json::parse(encode_outcome(*v.root_cause)) : json(nullptr);
  return json_text(j);
}

JobVerdict decode_verdict(std::string_view text) {
  return parse_record(text, "verdict", [](const json& j) {
    JobVerdict v;
    v.exit_code = json_int(j.at("exit_code"));
    v.message = j.at("message").get<std::string>();
    v.node = json_int(j.at("node"));
    v.lost = json_int(j.at("lost"));
    v.regroup = j.contains("regroup") && j.at("regroup").get<bool>();
    v.progress = j.contains("progress") ? json_int(j.at("progress")) : -1;
    v.preempt = j.contains("preempt") ? json_int(j.at("preempt")) : 0;
    v.preempt_delivered = j.contains("preempt_delivered") &&
                          j.at("preempt_delivered").is_boolean() &&
                          j.at("preempt_delivered").get<bool>();
    if (v.preempt < 0 || v.preempt >= 65) {
      throw RecordError("malformed verdict record: preempt is not a signal number");
    }
    if (!j.at("root_cause").is_null()) {
      v.root_cause = decode_outcome(j.at("root_cause").dump());
    }
    return v;
  });
}

}  // namespace ddplaunch
