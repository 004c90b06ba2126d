#include "cluster/precedence.hpp"

#include <algorithm>
#include <string_view>

#include "cluster/mpi_hostfile.hpp"
#include "cluster/openmpi.hpp"
#include "cluster/pet.hpp"
#include "cluster/platform.hpp"
#include "cluster/slurm.hpp"
#include "config/launch_error.hpp"

namespace ddplaunch {

std::vector<Detection> detect_all(const EnvMap& env, const ClusterFiles& files) {
  return {detect_pet(env), detect_slurm(env), detect_openmpi(env), detect_mpi_hostfile(env, files),
          detect_platform(env)};
}

namespace {

// Says where sources disagree on the job's shape, naming both.
void note_disagreements(Config& c, const std::vector<Detection>& detections) {
  for (const char* key : {"nnodes", "node_rank", "master_addr", "master_port", "rdzv_id"}) {
    const OptionSpec* spec = find_option(key);
    const std::string chosen = c.source_of(key);
    const std::string value = spec->show != nullptr ? spec->show(c) : "";
    for (const auto& d : detections) {
      auto it = d.values.find(key);
      if (it == d.values.end() || it->second.source == chosen || it->second.value == value) {
        continue;
      }
      const std::string who = chosen == "flag"      ? "the command line"
                              : chosen == "default" ? "the default"
                                                    : source_text(chosen);
      c.notes.push_back(long_name(*spec) + " " + value + " from " + who + " wins over " +
                        source_text(it->second.source) + "=" + it->second.value + " (" +
                        d.detector + ")");
    }
  }
}

// What a detector found beyond option values: its notes, its error, the
// Slurm allocation, PMIx's part, the values it needs given.
void apply_detection(Config& c, const Detection& d, const CommandLine& command_line) {
  c.notes.insert(c.notes.end(), d.notes.begin(), d.notes.end());
  if (!d.error.empty()) {
    if (!command_line.flags.contains("nnodes")) {
      throw UsageError(d.error);
    }
    c.notes.push_back(d.error + " (going on: --nnodes was given)");
  }
  if (d.token_via_pmix) {
    c.token_via_pmix = true;
  }
  if (d.allocation_nodes > 1) {
    // An sbatch script: the srun launcher starts every node, unless the
    // command line keeps the job here (--nnodes 1) or names its hosts.
    const bool kept_here = command_line.flags.contains("nnodes") && c.nnodes == 1;
    if (c.launcher == Launcher::k_srun ||
        (c.launcher == Launcher::k_auto && !kept_here && c.hosts.empty() && c.hostfile.empty())) {
      c.slurm_nodes = d.allocation_nodes;
    } else if (kept_here) {
      c.notes.push_back("this is a Slurm allocation of " + std::to_string(d.allocation_nodes) +
                        " nodes: --nnodes 1 keeps the job on this node");
    }
  }
  if (d.master_via_pmix && c.source_of("master_addr") == "default") {
    c.master_via_pmix = true;
    c.sources["master_addr"] = "PMIx";
  }
  for (const auto& [key, message] : d.needs) {
    if (c.source_of(key) == "default") {
      throw UsageError(message);
    }
  }
}

}  // namespace

Config resolve(const CommandLine& command_line, const std::vector<Detection>& detections) {
  Config c;
  for (const auto& spec : option_table()) {
    const Setting* chosen = nullptr;
    if (auto it = command_line.flags.find(spec.key); it != command_line.flags.end()) {
      chosen = &it->second;
    } else {
      for (const auto& d : detections) {
        if (auto found = d.values.find(spec.key); found != d.values.end()) {
          chosen = &found->second;
          break;
        }
      }
    }
    if (chosen == nullptr) {
      continue;
    }
    try {
      spec.apply(c, chosen->value, long_name(spec));
    } catch (const UsageError& e) {
      if (chosen->source == "flag") {
        throw;
      }
      throw UsageError(std::string(e.what()) + " (set by " + source_text(chosen->source) +
                       "; fix or unset it)");
    }
    c.sources[spec.key] = chosen->source;
    if (spec.also != nullptr) {
      std::string_view also = spec.also;
      while (!also.empty()) {
        auto comma = also.find(',');
        c.sources[std::string(also.substr(0, comma))] = chosen->source;
        also = comma == std::string_view::npos ? std::string_view() : also.substr(comma + 1);
      }
    }
  }
  for (const auto& d : detections) {
    apply_detection(c, d, command_line);
  }
  const bool in_allocation = std::any_of(detections.begin(), detections.end(),
                                         [](const Detection& d) { return d.allocation_nodes > 0; });
  if (c.launcher == Launcher::k_srun && !in_allocation && c.source_of("node_rank") == "default") {
    throw UsageError(
        "--launcher srun: this is not a Slurm allocation (no SLURM_JOB_ID); run ddplaunch in an "
        "sbatch or salloc script, or start the hosts with --hosts");
  }
  note_disagreements(c, detections);
  if (!command_line.command.empty()) {
    c.program = command_line.command.front();
    c.program_args.assign(command_line.command.begin() + 1, command_line.command.end());
  }
  validate(c);
  return c;
}

Config configure(const CommandLine& command_line, const EnvMap& env, const ClusterFiles& files) {
  return resolve(command_line, detect_all(env, files));
}

}  // namespace ddplaunch
