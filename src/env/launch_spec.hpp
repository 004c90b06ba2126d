// LaunchSpec: what to start on this node, one WorkerSpec per local rank, each with
// its complete argv and environment. A pure function of the Config, the
// layout rendezvous produced and the inherited environment.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "config/env_map.hpp"
#include "node/binding.hpp"
#include "topology/topology.hpp"

namespace ddplaunch {

struct WorkerSpec {
  int local_rank = 0;
  int rank = 0;
  std::vector<std::string> argv;  // argv[0] is the program as the user named it
  WorkerEnv env;
  std::vector<int> cpus;       // CPUs to bind it to before exec; empty: inherited
  bool inherit_stdin = false;  // local rank 0 reads the launcher's stdin; others /dev/null
  bool progress_pipe = false;  // fd 3 (DDPLAUNCH_PROGRESS_FD) is a pipe the launcher reads
  bool stdout_tty = false;     // its stdout is a pseudo-terminal, not a pipe (--stdout-tty)
};

// The fd a worker reports progress on with --hang-timeout (DDPLAUNCH_PROGRESS_FD).
inline constexpr int k_progress_fd = 3;

struct LaunchSpec {
  JobLayout layout;
  std::vector<WorkerSpec> workers;
  std::vector<std::string> notices;  // things to tell the user once
};

// The worker command line: `python -u script.py args` for a .py program,
// `python -u -m module args` with -m, the program as given otherwise.
// Python is --python, else $PYTHON_EXEC from `env`, else "python3".
std::vector<std::string> worker_argv(const Config& config, const EnvMap& env);

// `bindings` (one per local rank, or none) come from node/binding.hpp.
// `runtime`: variables every worker gets after an outer launcher's identity
// is removed (the PMIx server's, which replace any inherited PMIX_*).
LaunchSpec make_launch_spec(const Config& config, const JobLayout& layout, const EnvMap& base_env,
                            const std::vector<Binding>& bindings = {},
                            const std::vector<std::pair<std::string, std::string>>& runtime = {});

}  // namespace ddplaunch
