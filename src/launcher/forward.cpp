#include "launcher/forward.hpp"

#include <algorithm>
#include <array>
#include <map>

#include "env/scheduler_env.hpp"

namespace ddplaunch {

namespace {

constexpr std::array<std::string_view, 25> k_defaults = {
    "PATH",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "PYTHON*",
    "NCCL_*",
    "GLOO_*",
    "TORCH_*",
    "PYTORCH_*",
    "CUDA_*",
    "OMP_*",
    "MKL_*",
    "KMP_*",
    "UCX_*",
    "FI_*",
    "HF_*",
    "TRANSFORMERS_*",
    "WANDB_*",
    "TOKENIZERS_PARALLELISM",
    "PET_*",
    "DDPLAUNCH_*",
    "TF_CPP_*",
    "XLA_*",
    "OMPI_MCA_*",  // as mpirun forwards them (an outer mpirun's own never are)
};

}  // namespace

std::span<const std::string_view> default_forward_patterns() {
  return k_defaults;
}

bool glob_match(std::string_view pattern, std::string_view name) {
  // Iterative '*' matching with one backtrack point.
  size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') {
    ++p;
  }
  return p == pattern.size();
}

bool never_forwarded(std::string_view name) {
  static constexpr std::array<std::string_view, 17> k_never = {
      "HOSTNAME",
      "HOME",
      "USER",
      "LOGNAME",
      "SHELL",
      "PWD",
      "OLDPWD",
      "DISPLAY",
      "TERM",
      "SHLVL",
      "_",
      "MAIL",
      "CUDA_VISIBLE_DEVICES",  // each host's own GPUs
      "DDPLAUNCH_RDZV_TOKEN",  // the job token travels apart
      "DDPLAUNCH_AGENT_ID",
      "DDPLAUNCH_EXE",
      "DDPLAUNCH_PROGRESS_FD",
  };
  if (std::find(k_never.begin(), k_never.end(), name) != k_never.end()) {
    return true;
  }
  for (std::string_view prefix : {"SSH_", "XDG_", "SLURM_", "PMIX_", "PRTE_", "DDPLAUNCH_STORE_"}) {
    if (name.starts_with(prefix)) {
      return true;
    }
  }
  // Open MPI's: the user's MCA settings travel; the rest is a process's
  // identity in a job (an outer mpirun's, OMPI_COMM_WORLD_*).
  return name.starts_with("OMPI_") &&
         (!name.starts_with("OMPI_MCA_") || is_outer_mpi_identity(std::string(name)));
}

std::vector<std::pair<std::string, std::string>> forwarded_environment(
    const EnvMap& env, const std::vector<std::string>& exports,
    const std::vector<std::string>& patterns) {
  std::vector<std::string_view> globs;
  const bool defaults = std::find(patterns.begin(), patterns.end(), "none") == patterns.end();
  if (defaults) {
    globs.assign(k_defaults.begin(), k_defaults.end());
  }
  for (const auto& p : patterns) {
    if (p != "none") {
      globs.push_back(p);
    }
  }
  std::map<std::string, std::string> out;
  // An outer mpirun's own settings are not the user's (by value, too:
  // OMPI_MCA_orte_tmpdir_base).
  EnvMap own = env;
  strip_outer_mpi_identity(own);
  for (const auto& [name, value] : own) {
    if (never_forwarded(name)) {
      continue;
    }
    for (const auto glob : globs) {
      if (glob_match(glob, name)) {
        out[name] = value;
        break;
      }
    }
  }
  for (const auto& item : exports) {
    const size_t eq = item.find('=');
    if (eq != std::string::npos) {
      out[item.substr(0, eq)] = item.substr(eq + 1);
    } else if (auto it = env.find(item); it != env.end()) {
      out[item] = it->second;
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace ddplaunch
