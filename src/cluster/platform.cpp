#include "cluster/platform.hpp"

namespace ddplaunch {

namespace {

bool has_prefix(const EnvMap& env, std::string_view prefix) {
  auto it = env.lower_bound(std::string(prefix));
  return it != env.end() && it->first.starts_with(prefix);
}

// A Kubernetes Indexed Job's or JobSet's pod (JOB_COMPLETION_INDEX): the
// index is the node rank; node 0 is the index-0 pod, by its stable name. A
// JobSet names it <jobset>-<replicated job>-0-0 under the subdomain that
// defaults to the JobSet's name; an Indexed Job's pods are <job>-<index>,
// and their subdomain (the headless service) is not in the environment.
void detect_indexed_job(const EnvMap& env, Detection& d) {
  const std::string* index = env_value(env, "JOB_COMPLETION_INDEX");
  d.detector = "Kubernetes Indexed Job";
  const std::string* jobset = env_value(env, "JOBSET_NAME");
  const std::string* replicated = env_value(env, "REPLICATED_JOB_NAME");
  if (const std::string* job_index = env_value(env, "JOB_INDEX");
      job_index != nullptr && *job_index != "0") {
    d.error = "this pod is in Job " + *job_index +
              " of a JobSet's replicated job: number its nodes "
              "across the Jobs with --node-rank and --nnodes (JOB_COMPLETION_INDEX alone repeats "
              "in every Job)";
    return;
  }
  d.values["node_rank"] = Setting{*index, "JOB_COMPLETION_INDEX"};
  if (jobset != nullptr && replicated != nullptr) {
    d.detector = "Kubernetes JobSet";
    d.values["master_addr"] =
        Setting{*jobset + "-" + *replicated + "-0-0." + *jobset, "JOBSET_NAME"};
    d.values["rdzv_id"] = Setting{*jobset, "JOBSET_NAME"};
  } else {
    const std::string* host = env_value(env, "HOSTNAME");
    std::string job = host != nullptr ? *host : "JOB";
    if (const auto dash = job.rfind('-');
        dash != std::string::npos && job.substr(dash + 1) == *index) {
      job.resize(dash);
    }
    d.needs["master_addr"] = "this is pod " + *index +
                             " of a Kubernetes Indexed Job: give node 0's stable name, "
                             "--master-addr " +
                             job +
                             "-0.SERVICE (SERVICE: the headless service named in the pod "
                             "template's subdomain)";
  }
  d.needs["nnodes"] = "this is pod " + *index +
                      " of a Kubernetes Indexed Job: give --nnodes (its completions; "
                      "the pods' environment does not hold it)";
}

}  // namespace

Detection detect_platform(const EnvMap& env) {
  Detection d;
  const bool azure = env_value(env, "AZUREML_RUN_ID") != nullptr || has_prefix(env, "AZ_BATCH_");
  const bool kubernetes = env_value(env, "KUBERNETES_SERVICE_HOST") != nullptr;
  if ((!azure && !kubernetes) || has_prefix(env, "PET_")) {
    return d;  // an operator that sets torchrun's PET_* says it all there
  }
  d.detector = azure ? "Azure ML" : "Kubernetes operator";
  const std::string* master = env_value(env, "MASTER_ADDR");
  if (master == nullptr && kubernetes && env_value(env, "JOB_COMPLETION_INDEX") != nullptr) {
    detect_indexed_job(env, d);
    return d;
  }
  if (master == nullptr) {
    return d;  // not a distributed job's pod, or the operator sets PET_* only
  }
  d.values["master_addr"] = Setting{*master, "MASTER_ADDR"};
  if (const std::string* port = env_value(env, "MASTER_PORT")) {
    d.values["master_port"] = Setting{*port, "MASTER_PORT"};
  }
  if (const std::string* size = env_value(env, "WORLD_SIZE")) {
    d.values["nnodes"] = Setting{*size, "WORLD_SIZE"};
  }
  if (const std::string* node = env_value(env, "NODE_RANK")) {
    d.values["node_rank"] = Setting{*node, "NODE_RANK"};
  } else if (const std::string* rank = env_value(env, "RANK"); rank != nullptr && kubernetes) {
    // PyTorchJob's pods: the master is RANK 0, worker i is RANK i + 1.
    d.values["node_rank"] = Setting{*rank, "RANK"};
  }
  return d;
}

}  // namespace ddplaunch
