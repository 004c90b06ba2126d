// Kubernetes training operators (Kubeflow's PyTorchJob) and Azure ML's
// PyTorchConfiguration, when they start one launcher per node and set the
// per-node variables torch.distributed reads: MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE (the node count, one launcher per node) and NODE_RANK, or a
// pod's RANK where it names the node. Read only with the platform's own
// marker (KUBERNETES_SERVICE_HOST; AZUREML_RUN_ID or AZ_BATCH_*), so that
// stray MASTER_ADDR/RANK values in a shell do not turn into a job shape.
// Lowest in precedence: Slurm and Open MPI win, and where any PET_* variable
// is set (newer operators set torchrun's variables, and then WORLD_SIZE may
// count processes, not nodes) this detector reads nothing. Pure.
#pragma once

#include "cluster/detection.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

Detection detect_platform(const EnvMap& env);

}  // namespace ddplaunch
