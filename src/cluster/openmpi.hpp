// Open MPI as the per-node launcher (`mpirun -N 1 ddplaunch ...`; Azure ML's
// MpiConfiguration with one process per node): OMPI_COMM_WORLD_RANK is the
// node rank and OMPI_COMM_WORLD_SIZE the node count (OMPI_COMM_WORLD_NODE_RANK
// is not the node rank). Node 0's address comes from AZ_BATCH_MASTER_NODE
// (host:port) or AZ_BATCHAI_MPI_MASTER_NODE (host); when every process runs on
// this host, loopback serves; otherwise node 0 tells the others its address
// through mpirun's PMIx server (mpi/pmix_exchange.hpp). The job id
// and a port derive from mpirun's job (PMIX_NAMESPACE), so two mpirun jobs on
// one host do not meet. Pure.
#pragma once

#include "cluster/detection.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

Detection detect_openmpi(const EnvMap& env);

}  // namespace ddplaunch
