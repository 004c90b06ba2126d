#include "cluster/openmpi.hpp"

#include <cstdint>

namespace ddplaunch {

namespace {

// FNV-1a: the same value on every node for the same job id.
uint64_t fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h = (h ^ c) * 1099511628211ULL;
  }
  return h;
}

}  // namespace

Detection detect_openmpi(const EnvMap& env) {
  Detection d;
  d.detector = "Open MPI";
  const std::string* size = env_value(env, "OMPI_COMM_WORLD_SIZE");
  const std::string* rank = env_value(env, "OMPI_COMM_WORLD_RANK");
  if (size == nullptr || rank == nullptr) {
    return d;
  }
  d.values["nnodes"] = Setting{*size, "OMPI_COMM_WORLD_SIZE"};
  d.values["node_rank"] = Setting{*rank, "OMPI_COMM_WORLD_RANK"};
  if (const std::string* master = env_value(env, "AZ_BATCH_MASTER_NODE")) {
    d.values["rdzv_endpoint"] = Setting{*master, "AZ_BATCH_MASTER_NODE"};
  } else if (const std::string* host = env_value(env, "AZ_BATCHAI_MPI_MASTER_NODE")) {
    d.values["master_addr"] = Setting{*host, "AZ_BATCHAI_MPI_MASTER_NODE"};
  } else if (env_value(env, "PMIX_SERVER_URI41") != nullptr ||
             env_value(env, "PMIX_SERVER_URI4") != nullptr ||
             env_value(env, "PMIX_SERVER_URI3") != nullptr ||
             env_value(env, "PMIX_SERVER_URI2") != nullptr) {
    // mpirun runs a PMIx server: node 0 tells the others its address through it.
    d.master_via_pmix = true;
  } else {
    const std::string* local = env_value(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local == nullptr || *local != *size) {
      d.needs["master_addr"] =
          "mpirun started ddplaunch on several hosts and nothing says which one is node 0: "
          "give --master-addr (the first host of mpirun's host list) or set "
          "AZ_BATCH_MASTER_NODE=HOST:PORT";
    }
  }
  const char* job_var = "PMIX_NAMESPACE";
  const std::string* job = env_value(env, job_var);
  if (job == nullptr) {
    job_var = "OMPI_MCA_ess_base_jobid";
    job = env_value(env, job_var);
  }
  if (job != nullptr) {
    d.values["rdzv_id"] = Setting{"mpirun-" + *job, job_var};
    if (!d.values.contains("rdzv_endpoint")) {
      d.values["master_port"] = Setting{std::to_string(20000 + fingerprint(*job) % 10000), job_var};
    }
  }
  return d;
}

}  // namespace ddplaunch
