// Slurm: what srun tells each task. Under `srun --ntasks-per-node=1
// ddplaunch ...` every node's agent learns the job from the step: the node
// count (SLURM_STEP_NUM_NODES), its node rank (SLURM_NODEID), node 0's host
// (the first of SLURM_STEP_NODELIST), the job id (SLURM_JOB_ID, with the step
// id) and a master port derived from them, so nothing is typed. More than one
// task on a node is refused (each would start its own workers). In a batch
// script outside srun only the allocation's node count is taken: the launch
// then starts one agent per node through srun itself (--launcher srun,
// cluster/precedence.cpp). Pure.
#pragma once

#include "cluster/detection.hpp"
#include "config/env_map.hpp"

namespace ddplaunch {

Detection detect_slurm(const EnvMap& env);

}  // namespace ddplaunch
