// A job started from one command: `ddplaunch --hosts a:4,b:4 -- ./train`
// (or --hostfile, or --launcher local) starts one agent per host, over ssh
// or here, hands each the job token and the forwarded environment through
// the launcher channel (launcher/channel.hpp), prints their lines, forwards
// Ctrl-C and the other stop signals, and exits with the job's code. If this
// command dies, even by SIGKILL, every agent's channel ends and every agent
// stops its workers. Also the srun launcher: inside a Slurm allocation,
// outside any step, the job runs on every node through one srun step.
// The set-up is here; the state machine that runs the job is HostsLauncher
// (launcher/hosts_launcher.hpp). Called from main() on the main thread,
// before any other thread exists.
#pragma once

#include <string>
#include <vector>

#include "config/command_line.hpp"
#include "config/config.hpp"
#include "config/env_map.hpp"
#include "launcher/agent_channel.hpp"

namespace ddplaunch {

// Starts and relays the whole job; returns its exit code. `upstream`: this
// command is a subtree's root, started by another launching command whose
// channel it passes on (nullptr at the top).
int run_hosts_launch(const Config& config, const CommandLine& command_line, const EnvMap& env,
                     AgentChannel* upstream);

// Replaces this process with `srun` starting this same command line on every
// node of the allocation (one task per node). `args`: this process's
// arguments after argv[0]. Returns only by throwing.
[[noreturn]] void exec_srun_launch(const Config& config, const EnvMap& env,
                                   const std::vector<std::string>& args);

}  // namespace ddplaunch
