// PMIx exchange: node 0's store address, passed among the agents one mpirun
// started (one per node), through the PMIx server mpirun already runs. Node 0
// puts the addresses of its interfaces, every agent commits and fences, and
// the others get node 0's list and pick the address on a network they share.
//
// Run by agent/launch.cpp after the configuration is resolved and before the
// Agent exists; the exchange blocks, so it runs on a thread of its own while
// the caller's wait (the Driver's, which reads the signals) waits for it.
// libpmix is loaded at run time (dlopen), only on this path, so the binary
// needs nothing but libc elsewhere.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ddplaunch {

// True when this build can speak PMIx (pmix.h was found at configure time).
bool pmix_built_in();

// Waits until an fd is readable (true) or a deadline passes (false); may
// throw (a stop signal: Driver::wait_readable).
using WaitReadable = std::function<bool(int fd, std::chrono::steady_clock::time_point deadline)>;

// What node 0 hands every node through PMIx.
struct PmixShared {
  std::string master_addr;  // node 0's address as this node should dial it
  // A random job token node 0 made when it had none of its own: PMIx is a
  // channel the resource manager authenticates, so with nothing typed the
  // store admits only this job. Empty when node 0 offered none.
  std::string token;
};

// `node_rank` is this agent's node rank (OMPI_COMM_WORLD_RANK, which is also
// its PMIx rank); node 0 puts `own_addrs`, and `offer_token` when not empty.
// Waits at most `timeout`, through `wait`, whose exception passes through.
// Throws LaunchError k_exit_rendezvous when the exchange fails or times out.
PmixShared pmix_exchange(int node_rank, const std::vector<std::string>& own_addrs,
                         const std::string& offer_token, std::chrono::milliseconds timeout,
                         const WaitReadable& wait);

// Of node 0's addresses, the one to dial from a host with `own_networks`
// ("addr/prefix" of each interface): the first on a network both share, else
// the first. Pure; for the tests.
std::string choose_master_addr(const std::vector<std::string>& master_addrs,
                               const std::vector<std::string>& own_networks);

}  // namespace ddplaunch
