// Kubeflow Trainer's MPI runtime, without its launcher pod: every node's pod
// has the job's hostfile mounted at /etc/mpi/hostfile (or where
// OMPI_MCA_orte_default_hostfile names it), one line a node in Open MPI's
// syntax ("job-node-0-1.job slots=4"; MPICH's "host:4" too). ddplaunch in
// each pod reads it: the node count is its lines, this node's rank its
// line's place (found by this host's name), its workers the line's slots,
// and node 0 the first line's host. Read only in a Kubernetes pod
// (KUBERNETES_SERVICE_HOST) or where OMPI_MCA_orte_default_hostfile names
// the file, and only where neither PET_*, Slurm nor mpirun set anything. Pure: the file's text and
// this host's name come in as values (node/cluster_files reads them).
#pragma once

#include <optional>
#include <string>

#include "cluster/detection.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

// What the node's files say, read by the edge before the detectors run.
struct ClusterFiles {
  std::string mpi_hostfile_path;            // where it was looked for
  std::optional<std::string> mpi_hostfile;  // its text, where it exists
  std::string hostname;                     // this host's name (gethostname)
};

inline constexpr const char* k_mpi_hostfile = "/etc/mpi/hostfile";

Detection detect_mpi_hostfile(const EnvMap& env, const ClusterFiles& files);

}  // namespace ddplaunch
