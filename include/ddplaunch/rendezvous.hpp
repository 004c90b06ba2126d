// Rendezvous: how the agents of a multi-node job find each other through the
// store, agree on the job's shape, and get their node rank and rank range.
// The agent on the master hosts the store. See docs/PROTOCOL.md.
#pragma once

#include <memory>

#include "ddplaunch/agent.hpp"
#include "ddplaunch/config.hpp"
#include "ddplaunch/env_builders.hpp"

namespace ddplaunch {

struct RendezvousResult {
  JobLayout layout;               // this node's place in the job
  std::unique_ptr<JobLink> link;  // the agent's connection to the other nodes
};

// Joins the job described by `config` (nnodes > 1). `local` carries this
// node's worker count and host name. Throws LaunchError with exit code 3 on
// timeout or disagreement, 4 when the store is lost.
RendezvousResult rendezvous(const Config& config, const JobLayout& local);

}  // namespace ddplaunch
