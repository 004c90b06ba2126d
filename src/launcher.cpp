#include "ddplaunch/launcher.hpp"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "ddplaunch/agent.hpp"
#include "ddplaunch/error.hpp"
#include "ddplaunch/plan.hpp"
#include "ddplaunch/rendezvous.hpp"
#include "ddplaunch/summary.hpp"
#include "log.hpp"
#include "posix/fd.hpp"
#include "posix/net.hpp"

namespace ddplaunch {

namespace {

const char* mode_name(NprocMode mode) {
  switch (mode) {
    case NprocMode::k_fixed: return "fixed";
    case NprocMode::k_auto: return "auto";
    case NprocMode::k_cpu: return "cpu";
    case NprocMode::k_gpu: return "gpu";
  }
  return "fixed";
}

void write_summary_json(const std::string& path, const JobSummary& summary) {
  std::ofstream out(path, std::ios::trunc);
  out << summary_to_json(summary);
  out.close();
  if (!out) {
    log::error("--summary-json: cannot write {}; check the directory exists and is writable",
               path);
  }
}

}  // namespace

std::string dry_run_json(const Config& c, const Plan& plan) {
  using nlohmann::json;
  json config = {{"nproc_per_node", plan.layout.local_world_size},
                 {"nproc_mode", mode_name(c.nproc_mode)},
                 {"nnodes", c.nnodes},
                 {"node_rank", c.node_rank ? json(*c.node_rank) : json("auto")},
                 {"master_addr", c.master_addr},
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
  json workers = json::array();
  for (const auto& w : plan.workers) {
    workers.push_back({{"local_rank", w.local_rank},
                       {"rank", w.rank},
                       {"argv", w.argv},
                       {"stdin", w.inherit_stdin ? "inherited" : "/dev/null"},
                       {"env", w.env}});
  }
  json doc = {{"config", config}, {"workers", workers}, {"notices", plan.notices}};
  return doc.dump(2) + "\n";
}

int run_launcher(const Config& config, const EnvMap& env) {
  // Block the signals the launcher handles before any thread (the store
  // server) starts, so they are only ever seen through a signalfd.
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    sigaddset(&mask, s);
  }
  sigprocmask(SIG_BLOCK, &mask, nullptr);

  const int nproc = resolve_nproc(config.nproc_mode, config.nproc_per_node, probe_resources(env));
  JobLayout layout;
  layout.nnodes = config.nnodes;
  layout.local_world_size = nproc;
  layout.world_size = nproc;
  layout.master_addr = config.master_addr;
  layout.run_id = config.rdzv_id;
  layout.role = config.role;
  layout.max_restarts = config.max_restarts;
  layout.hostname = local_hostname();

  std::unique_ptr<JobLink> link;
  if (config.nnodes == 1 || config.dry_run) {
    layout.node_rank = config.node_rank.value_or(0);
    layout.rank_offset = layout.node_rank * nproc;
    layout.world_size = nproc * config.nnodes;
    layout.master_port = config.worker_port.value_or(0);
    if (layout.master_port == 0) {
      layout.master_port = posix::pick_free_port();
    }
  } else {
    auto rdzv = rendezvous(config, layout);
    layout = rdzv.layout;
    link = std::move(rdzv.link);
  }

  Plan plan = make_plan(config, layout, env);
  if (config.dry_run) {
    std::string doc = dry_run_json(config, plan);
    posix::write_all(1, doc);
    return k_exit_ok;
  }
  for (const auto& notice : plan.notices) {
    log::info("{}", notice);
  }
  log::debug("starting {} worker(s) for ranks {}..{} of {}", plan.workers.size(),
             layout.rank_offset, layout.rank_offset + nproc - 1, layout.world_size);

  Agent agent(config, std::move(plan), link.get());
  JobSummary summary = agent.run();
  if (!config.summary_json.empty()) {
    write_summary_json(config.summary_json, summary);
  }
  std::string report = format_failure_report(summary);
  if (!report.empty()) {
    posix::write_all(2, report);
  }
  return summary.exit_code;
}

}  // namespace ddplaunch
