// This node as the job sees it: its host name, the address it advertises and
// the interface holding it, and the process's own peak memory. Discovery reads
// the system (interfaces, routes, the resolver, /proc); NodeIdentity itself
// is a plain value. Thread-compatible.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "node/binding.hpp"

namespace ddplaunch {

// This node as the agent presents it to the job.
struct NodeIdentity {
  std::string host;               // host name
  std::string addr;               // advertised address
  int nproc = 1;                  // workers (--nproc-per-node resolved)
  int free_port = 0;              // MASTER_PORT for a one-node job without --worker-port
  std::vector<int> worker_ports;  // one reserved port per worker (--env-style tf)
  std::string ifname;             // the interface holding it (gloo's and NCCL's); empty: unset
  std::vector<Binding> bindings;  // CPUs and GPUs per local rank; empty: inherited
  // A fresh MASTER_PORT for a one-node job's next round; unset: the same again.
  std::function<int()> pick_port;
  // The job's private directory on this node, for the workers' error files
  // (made and removed by the JobGuard); empty: the Agent makes its own.
  std::string job_dir;
};

// Fills `self`'s host name, advertised address (--local-addr; one node:
// 127.0.0.1, with no resolver call; else the one its
// packets to node 0 at `master_addr` leave from, else its host name's) and
// the interface holding it. Warns when a job across hosts would advertise a
// loopback address.
void find_own_address(const Config& config, const std::string& master_addr, NodeIdentity& self);

// This host's addresses other hosts may dial: every non-loopback one, else loopback.
std::vector<std::string> dialable_addrs();

// Throws UsageError for a --master-addr this node cannot resolve at all (a
// typo), rather than retrying it until --rdzv-timeout; a passing DNS failure
// is left to the retries.
void check_master_resolves(const Config& config);

// This program image's peak resident set in KiB (VmHWM).
long peak_rss_kib();

}  // namespace ddplaunch
