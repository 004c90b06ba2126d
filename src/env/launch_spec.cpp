#include "env/launch_spec.hpp"

#include <memory>

#include "env/mpi_env.hpp"
#include "env/scheduler_env.hpp"
#include "env/tf_env.hpp"
#include "env/torch_env.hpp"

namespace ddplaunch {

std::vector<std::string> worker_argv(const Config& config, const EnvMap& env) {
  std::vector<std::string> argv;
  const bool is_script = config.program.size() > 3 && config.program.ends_with(".py");
  if (config.run_path || (!config.no_python && (config.module || is_script))) {
    std::string python = config.python;
    if (python.empty()) {
      auto it = env.find("PYTHON_EXEC");
      python = (it != env.end() && !it->second.empty()) ? it->second : "python3";
    }
    argv = {python, "-u"};
    if (config.module && !config.run_path) {
      argv.emplace_back("-m");
    }
  }
  argv.push_back(config.program);
  argv.insert(argv.end(), config.program_args.begin(), config.program_args.end());
  return argv;
}

namespace {

// One worker's argv: torchrun's ${local_rank} macro replaced, and
// torch.distributed.launch's --local-rank argument where asked for.
std::vector<std::string> argv_of(const Config& config, const std::vector<std::string>& argv,
                                 int local_rank) {
  std::vector<std::string> out = argv;
  const size_t first_arg = argv.size() - config.program_args.size();
  for (size_t i = first_arg; i < out.size(); ++i) {
    for (size_t at; (at = out[i].find("${local_rank}")) != std::string::npos;) {
      out[i].replace(at, 13, std::to_string(local_rank));
    }
  }
  if (!config.local_rank_arg.empty()) {
    const char* name = config.local_rank_arg == "dash" ? "--local-rank=" : "--local_rank=";
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(first_arg),
               name + std::to_string(local_rank));
  }
  return out;
}

// The worker's binding: its CPUs (into SPEC), its GPUs and OpenMP threads
// (into ENV).
void apply_binding(WorkerSpec& spec, EnvMap& env, const Binding& b, const EnvMap& base_env) {
  spec.cpus = b.cpus;
  if (b.set_gpus) {
    std::string list;
    for (const auto& g : b.gpus) {
      list += (list.empty() ? "" : ",") + g;
    }
    env["CUDA_VISIBLE_DEVICES"] = list;
  }
  if (b.omp_threads > 0 && !base_env.contains("OMP_NUM_THREADS")) {
    env["OMP_NUM_THREADS"] = std::to_string(b.omp_threads);
  }
}

// A worker's whole environment: the frameworks' variables over STRIPPED
// (the launcher's environment less an outer launcher's MPI identity).
EnvMap env_of(const Config& config, const JobLayout& layout, const EnvMap& stripped,
              int local_rank) {
  EnvMap env = build_torch_env(stripped, layout, local_rank);
  if (config.virtual_local_rank) {
    env["LOCAL_RANK"] = "0";  // its one GPU is device 0 (CUDA_VISIBLE_DEVICES, bindings)
  }
  rewrite_slurm_identity(env, layout, local_rank);
  if (config.env_mpi) {
    add_mpi_env(env, layout, local_rank);
  }
  if (config.env_tf) {
    if (auto tf = tf_config(layout, local_rank, TfRoles{config.tf_chief, config.tf_ps});
        !tf.empty()) {
      env["TF_CONFIG"] = tf;
    }
  }
  return env;
}

}  // namespace

LaunchSpec make_launch_spec(const Config& config, const JobLayout& layout, const EnvMap& base_env,
                            const std::vector<Binding>& bindings,
                            const std::vector<std::pair<std::string, std::string>>& runtime) {
  LaunchSpec plan;
  plan.layout = layout;
  const auto argv = worker_argv(config, base_env);
  // Every worker's environment is kept as its difference from the first
  // worker's: only the per-rank variables (RANK, LOCAL_RANK, ...) are stored
  // per worker, not the ~20 the job's workers share (2 MiB at 1,024).
  std::shared_ptr<const EnvMap> first;
  // An outer launcher's MPI identity goes once, not once per worker.
  EnvMap stripped = base_env;
  strip_outer_mpi_identity(stripped);
  for (const auto& [name, value] : runtime) {
    stripped[name] = value;
  }
  for (int local_rank = 0; local_rank < layout.local_world_size; ++local_rank) {
    WorkerSpec spec;
    spec.local_rank = local_rank;
    spec.rank = layout.rank_offset + local_rank;
    spec.argv = argv_of(config, argv, local_rank);
    EnvMap env = env_of(config, layout, stripped, local_rank);
    if (static_cast<size_t>(local_rank) < bindings.size()) {
      apply_binding(spec, env, bindings[static_cast<size_t>(local_rank)], base_env);
    }
    if (config.hang_timeout_s > 0 || config.progress_restarts()) {
      // Progress for --hang-timeout and --restart-min-progress.
      spec.progress_pipe = true;
      env["DDPLAUNCH_PROGRESS_FD"] = std::to_string(k_progress_fd);
    }
    if (config.hang_timeout_s > 0 && !base_env.contains("PYTHONFAULTHANDLER")) {
      // Python's faulthandler prints every thread's stack when the launcher
      // stops a hung rank (SIGABRT).
      env["PYTHONFAULTHANDLER"] = "1";
    }
    if (!first) {
      first = std::make_shared<const EnvMap>(env);
    }
    spec.env = WorkerEnv(first, env);
    spec.inherit_stdin = local_rank == 0;
    plan.workers.push_back(std::move(spec));
  }
  const bool bound = !bindings.empty() && bindings.front().omp_threads > 0;
  if (sets_omp_num_threads(base_env, layout) && !bound) {
    plan.notices.push_back(
        "OMP_NUM_THREADS is not set: setting it to 1 for each worker to avoid "
        "oversubscribing the CPUs; set it yourself to tune it");
  }
  return plan;
}

}  // namespace ddplaunch
