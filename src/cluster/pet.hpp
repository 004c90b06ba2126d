// torchrun's environment defaults: torchrun reads PET_<NAME> for each of its
// options (Kubeflow's PyTorchJob, for one, sets PET_NNODES,
// PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT).
// The option table names the variable of each option. Pure.
#pragma once

#include "cluster/detection.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

Detection detect_pet(const EnvMap& env);

}  // namespace ddplaunch
