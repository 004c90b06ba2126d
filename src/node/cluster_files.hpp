// The files a cluster's detectors read (cluster/mpi_hostfile): read once, at
// start-up, by the edge, and handed to configure() as values. Only where a
// detector could use them (a Kubernetes pod, or OMPI_MCA_orte_default_hostfile
// set): elsewhere a launch reads nothing. Not thread-safe (gethostname).
#pragma once

#include "cluster/mpi_hostfile.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

ClusterFiles read_cluster_files(const EnvMap& env);

}  // namespace ddplaunch
