#include "cluster/platform.hpp"

namespace ddplaunch {

namespace {

const std::string* get(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

bool has_prefix(const EnvMap& env, std::string_view prefix) {
  auto it = env.lower_bound(std::string(prefix));
  return it != env.end() && it->first.starts_with(prefix);
}

}  // namespace

Detection detect_platform(const EnvMap& env) {
  Detection d;
  const bool azure = get(env, "AZUREML_RUN_ID") != nullptr || has_prefix(env, "AZ_BATCH_");
  const bool kubernetes = get(env, "KUBERNETES_SERVICE_HOST") != nullptr;
  if ((!azure && !kubernetes) || has_prefix(env, "PET_")) {
    return d;  // an operator that sets torchrun's PET_* says it all there
  }
  d.detector = azure ? "Azure ML" : "Kubernetes operator";
  const std::string* master = get(env, "MASTER_ADDR");
  if (master == nullptr) {
    return d;  // not a distributed job's pod, or the operator sets PET_* only
  }
  d.values["master_addr"] = Setting{*master, "MASTER_ADDR"};
  if (const std::string* port = get(env, "MASTER_PORT")) {
    d.values["master_port"] = Setting{*port, "MASTER_PORT"};
  }
  if (const std::string* size = get(env, "WORLD_SIZE")) {
    d.values["nnodes"] = Setting{*size, "WORLD_SIZE"};
  }
  if (const std::string* node = get(env, "NODE_RANK")) {
    d.values["node_rank"] = Setting{*node, "NODE_RANK"};
  } else if (const std::string* rank = get(env, "RANK"); rank != nullptr && kubernetes) {
    // PyTorchJob's pods: the master is RANK 0, worker i is RANK i + 1.
    d.values["node_rank"] = Setting{*rank, "RANK"};
  }
  return d;
}

}  // namespace ddplaunch
