#include "output/report_json.hpp"

#include <nlohmann/json.hpp>

#include "config/options.hpp"
#include "output/json_fields.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;

json outcome_json(const RankOutcome& o) {
  json j = {{"rank", o.rank},
            {"local_rank", o.local_rank},
            {"node_rank", o.node_rank},
            {"host", o.host},
            {"pid", o.pid},
            {"stopped_by_launcher", o.stopped_by_launcher},
            {"start_time", o.start_time},
            {"end_time", o.end_time}};
  if (!o.exit) {
    j["state"] = "unknown";
    j["exit_code"] = nullptr;
    j["signal"] = nullptr;
  } else if (o.exit->by_signal()) {
    j["state"] = "signaled";
    j["exit_code"] = nullptr;
    j["signal"] = o.exit->signal();
    j["signal_name"] = signal_name(o.exit->signal());
  } else {
    j["state"] = o.preempted ? "preempted" : o.exit->success() ? "succeeded" : "failed";
    j["exit_code"] = o.exit->code();
    j["signal"] = nullptr;
  }
  if (!o.stack.empty()) {
    j["stack"] = o.stack;
  }
  if (o.hung_for_s > 0) {
    j["hung_for_s"] = o.hung_for_s;
  }
  if (!o.last_stderr.empty()) {
    j["last_stderr"] = o.last_stderr;
  }
  if (o.error) {
    j["error"] = {{"message", o.error->message},
                  {"traceback", o.error->traceback},
                  {"timestamp", o.error->timestamp}};
  }
  return j;
}

RankOutcome outcome_from(const json& j) {
  RankOutcome o;
  o.rank = json_int(j.at("rank"));
  o.local_rank = json_int(j.at("local_rank"));
  o.node_rank = json_int(j.at("node_rank"));
  o.host = j.at("host").get<std::string>();
  o.pid = json_int(j.at("pid"));
  o.stopped_by_launcher = j.at("stopped_by_launcher").get<bool>();
  o.start_time = j.at("start_time").get<double>();
  o.end_time = j.at("end_time").get<double>();
  const auto state = j.at("state").get<std::string>();
  if (state == "signaled") {
    o.exit = ExitInfo::signaled(json_int(j.at("signal")));
  } else if (state == "succeeded" || state == "failed" || state == "preempted") {
    o.exit = ExitInfo::exited(json_int(j.at("exit_code")));
    o.preempted = state == "preempted";
  } else if (state != "unknown") {
    throw RecordError("unknown rank state '" + state + "'");
  }
  if (j.contains("stack")) {
    o.stack = j.at("stack").get<std::string>();
  }
  if (j.contains("hung_for_s")) {
    o.hung_for_s = j.at("hung_for_s").get<double>();
  }
  if (j.contains("last_stderr")) {
    o.last_stderr = j.at("last_stderr").get<std::vector<std::string>>();
  }
  if (j.contains("error")) {
    const json& e = j.at("error");
    o.error = WorkerError{e.at("message").get<std::string>(), e.at("traceback").get<std::string>(),
                          e.at("timestamp").get<std::string>()};
  }
  return o;
}

// At most `limit` bytes of `text`, from its start or (tail) its end, cut on a
// UTF-8 character boundary.
std::string bounded(std::string text, size_t limit, bool tail) {
  if (text.size() <= limit) {
    return text;
  }
  size_t cut = tail ? text.size() - limit : limit;
  auto continuation = [&](size_t i) {
    return i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  while (continuation(cut)) {
    tail ? ++cut : --cut;
  }
  return tail ? "..." + text.substr(cut) : text.substr(0, cut) + "...";
}

constexpr size_t k_error_message_bytes = 4096;
constexpr size_t k_error_traceback_bytes = 16384;

json topology_json(const Topology& t) {
  json sizes = json::array();
  for (const auto& run : t.sizes) {
    sizes.push_back(json::array({run.nproc, run.count}));
  }
  json nodes = json::array();
  for (const auto& n : t.nodes) {
    json workers = json::array();
    for (const auto& w : n.workers) {
      workers.push_back({{"rank", w.rank}, {"local_rank", w.local_rank}, {"port", w.port}});
    }
    nodes.push_back({{"node_rank", n.node_rank},
                     {"host", n.host},
                     {"addr", n.addr},
                     {"nproc", n.nproc},
                     {"first_rank", n.first_rank},
                     {"workers", workers}});
  }
  return {{"world_size", t.world_size},   {"nnodes", t.nnodes()},         {"sizes", sizes},
          {"master_addr", t.master_addr}, {"master_port", t.master_port}, {"nodes", nodes}};
}

}  // namespace

std::string encode_outcome(const RankOutcome& outcome) {
  return json_text(outcome_json(outcome));
}

RankOutcome decode_outcome(std::string_view text) {
  try {
    return outcome_from(json::parse(text));
  } catch (const json::exception& e) {
    throw RecordError(std::string("malformed outcome: ") + e.what());
  }
}

std::string encode_outcomes(const std::vector<RankOutcome>& outcomes) {
  json list = json::array();
  for (const auto& o : outcomes) {
    list.push_back(outcome_json(o));
  }
  return json_text(list);
}

std::vector<RankOutcome> decode_outcomes(std::string_view text) {
  try {
    std::vector<RankOutcome> out;
    for (const auto& o : json::parse(text)) {
      out.push_back(outcome_from(o));
    }
    return out;
  } catch (const json::exception& e) {
    throw RecordError(std::string("malformed result record: ") + e.what());
  }
}

std::optional<WorkerError> decode_error_file(std::string_view text) {
  try {
    const json doc = json::parse(text);
    if (!doc.is_object() || !doc.contains("message")) {
      return std::nullopt;
    }
    const json& m = doc.at("message");
    WorkerError e;
    if (m.is_string()) {
      e.message = m.get<std::string>();
    } else if (m.is_object() && m.contains("message") && m.at("message").is_string()) {
      e.message = m.at("message").get<std::string>();
      if (m.contains("extraInfo") && m.at("extraInfo").is_object()) {
        const json& extra = m.at("extraInfo");
        if (extra.contains("py_callstack") && extra.at("py_callstack").is_string()) {
          e.traceback = extra.at("py_callstack").get<std::string>();
        }
        if (extra.contains("timestamp") && extra.at("timestamp").is_string()) {
          e.timestamp = extra.at("timestamp").get<std::string>();
        }
      }
    } else {
      return std::nullopt;
    }
    e.message = bounded(std::move(e.message), k_error_message_bytes, false);
    e.traceback = bounded(std::move(e.traceback), k_error_traceback_bytes, true);
    return e;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::string encode_error_file(const WorkerError& e, int error_code) {
  json doc = {{"message",
               {{"message", e.message},
                {"extraInfo", {{"py_callstack", e.traceback}, {"timestamp", e.timestamp}}},
                {"errorCode", error_code}}}};
  return json_text(doc);
}

std::string encode_summary(const JobSummary& s) {
  json doc = {{"run_id", s.run_id},
              {"exit_code", s.exit_code},
              {"stop_reason", stop_reason_name(s.reason)},
              {"start_time", s.start_time},
              {"end_time", s.end_time},
              {"launcher_max_rss_kib", s.launcher_max_rss_kib}};
  doc["stop_signal"] = s.stop_signal ? json(signal_name(*s.stop_signal)) : json(nullptr);
  doc["root_cause"] = s.root_cause ? outcome_json(*s.root_cause) : json(nullptr);
  if (!s.message.empty()) {
    doc["message"] = s.message;
  }
  doc["topology"] = s.topology ? topology_json(*s.topology) : json(nullptr);
  doc["max_restarts"] = s.max_restarts;
  doc["restarts"] = s.restarts;
  if (s.health_check) {
    const HealthCheckResult& h = *s.health_check;
    doc["health_check"] = {{"command", h.command},
                           {"ok", h.ok},
                           {"status", h.status},
                           {"seconds", h.seconds},
                           {"output", h.output}};
  }
  json rounds = json::array();
  for (const auto& r : s.rounds) {
    json round = {{"round", r.round},           {"nnodes", r.nnodes},
                  {"regroup", r.regroup},       {"exit_code", r.exit_code},
                  {"start_time", r.start_time}, {"end_time", r.end_time}};
    round["root_cause"] = r.root_cause ? outcome_json(*r.root_cause) : json(nullptr);
    if (r.made_progress) {
      round["made_progress"] = *r.made_progress;
      round["progress_events"] = r.progress_events;
    }
    if (!r.message.empty()) {
      round["message"] = r.message;
    }
    if (!r.replaced.empty()) {
      json replaced = json::array();
      for (const auto& x : r.replaced) {
        replaced.push_back({{"node_rank", x.node_rank}, {"lost", x.lost}, {"spare", x.spare}});
      }
      round["replaced"] = std::move(replaced);
    }
    rounds.push_back(std::move(round));
  }
  doc["rounds"] = std::move(rounds);
  json ranks = json::array();
  for (const auto& o : s.ranks) {
    ranks.push_back(outcome_json(o));
  }
  doc["ranks"] = std::move(ranks);
  return json_text(doc, 2) + "\n";
}

std::string encode_dry_run(const Config& c, const LaunchSpec& plan, const Topology& topology) {
  json config = {{"nproc_per_node", plan.layout.local_world_size},
                 {"nproc_mode", nproc_mode_name(c.nproc_mode)},
                 {"nnodes", c.nnodes},
                 {"node_rank", c.node_rank ? json(*c.node_rank) : json("auto")},
                 {"master_addr", c.master_via_pmix ? "<node 0's, through PMIx>" : c.master_addr},
                 {"master_port", c.master_port},
                 {"worker_port", plan.layout.master_port},
                 {"rdzv_id", c.rdzv_id},
                 {"rdzv_timeout", c.rdzv_timeout_s},
                 {"term_timeout", c.term_timeout_s},
                 {"heartbeat_interval", c.heartbeat_interval_s},
                 {"heartbeat_timeout", c.heartbeat_timeout_s},
                 {"max_restarts", c.max_restarts},
                 {"role", c.role},
                 {"prefix", c.prefix},
                 {"log_dir", c.log_dir},
                 {"summary_json", c.summary_json},
                 {"program", c.program},
                 {"program_args", c.program_args}};
  json sources = json::object();
  for (const auto& spec : option_table()) {
    sources[spec.key] = c.source_of(spec.key);
  }
  json placeholders = json::object();
  if (c.nnodes > 1) {
    placeholders["node_rank"] =
        c.node_rank ? "given; the node's ranks still depend on every node's --nproc-per-node"
                    : "automatic: assigned at rendezvous (0 shown)";
    placeholders["RANK"] =
        "assumes every node runs " + std::to_string(plan.layout.local_world_size) +
        " workers; the first rank of each node is known at rendezvous (also GROUP_RANK, "
        "NODE_RANK, ROLE_RANK)";
    placeholders["WORLD_SIZE"] = "the sum of every node's workers, known at rendezvous";
    if (c.master_via_pmix) {
      placeholders["MASTER_ADDR"] =
          "node 0's address, exchanged through mpirun's PMIx server at start (127.0.0.1 shown)";
    }
    if (!c.worker_port) {
      placeholders["MASTER_PORT"] = "picked on the master host at rendezvous (a free port here)";
    }
  } else if (!c.worker_port) {
    placeholders["MASTER_PORT"] = "a free port picked for this run";
  }
  placeholders["TORCHELASTIC_ERROR_FILE"] =
      c.log_dir.empty() ? "each rank's own, in a private directory made at start"
                        : "each rank's own: " + c.log_dir + "/<rank>/error.json";
  json workers = json::array();
  for (const auto& w : plan.workers) {
    workers.push_back({{"local_rank", w.local_rank},
                       {"rank", w.rank},
                       {"argv", w.argv},
                       {"stdin", w.inherit_stdin ? "inherited" : "/dev/null"},
                       {"cpus", w.cpus.empty() ? json("inherited") : json(w.cpus)},
                       {"env", w.env.full()}});
  }
  std::vector<std::string> notices = c.notes;
  notices.insert(notices.end(), plan.notices.begin(), plan.notices.end());
  json doc = {{"config", config},
              {"sources", sources},
              {"placeholders", placeholders},
              {"topology", topology_json(topology)},
              {"workers", workers},
              {"notices", notices}};
  return json_text(doc, 2) + "\n";
}

}  // namespace ddplaunch
