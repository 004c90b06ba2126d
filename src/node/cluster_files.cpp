#include "node/cluster_files.hpp"

#include <unistd.h>

#include <climits>
#include <fstream>
#include <sstream>
#include <system_error>

#include "config/launch_error.hpp"

namespace ddplaunch {

namespace {

// A hostfile is a few lines a node; anything past this is not one.
constexpr std::streamoff k_max_hostfile = 1 << 20;

}  // namespace

ClusterFiles read_cluster_files(const EnvMap& env) {
  ClusterFiles files;
  const std::string* named = env_value(env, "OMPI_MCA_orte_default_hostfile");
  if (named == nullptr && env_value(env, "KUBERNETES_SERVICE_HOST") == nullptr) {
    return files;
  }
  files.mpi_hostfile_path = named != nullptr ? *named : k_mpi_hostfile;
  std::ifstream in(files.mpi_hostfile_path, std::ios::binary);
  if (!in) {
    return files;  // no hostfile: not Trainer's MPI runtime
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.tellp() > k_max_hostfile) {
    throw UsageError(files.mpi_hostfile_path +
                     " is over 1 MiB: it is not an MPI hostfile; fix "
                     "OMPI_MCA_orte_default_hostfile, or give --nnodes and --node-rank");
  }
  files.mpi_hostfile = text.str();
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0) {
    files.hostname = name;
  }
  return files;
}

}  // namespace ddplaunch
