// This node as the job sees it: its host name, the address it advertises and
// the interface holding it, and the process's own peak memory. Discovery reads
// the system (interfaces, routes, the resolver, /proc); NodeIdentity itself
// is a plain value. Thread-compatible.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "node/binding.hpp"
#include "node/cma.hpp"

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
  // The interface this node's packets to a peer's address leave from ("":
  // unknown). Once every node's address is known (node 0 knows them all),
  // gloo's and NCCL's interface is the one that reaches the peers, which on
  // a multi-NIC node 0 need not hold its default route. Unset: use `ifname`.
  std::function<std::string(const std::string& peer_addr)> ifname_towards;
  // Why this node failed its health check (--health-check), said in its join
  // record so that node 0 ends or goes on without it; empty: healthy.
  std::string health;
  // Its network preflight listener (--preflight), on `addr`; 0: none.
  int probe_port = 0;
  // This launch's random id (new_job_id()): node 0's becomes the job's.
  std::string job_id{};
  // The CPUs this node's workers may use (its affinity, or the CPUs its
  // bindings give them); 0: unknown.
  int usable_cpus = 0;
  // Whether Open MPI's single-copy shared memory works here (node/cma.hpp),
  // asked once an MPI round starts; unset: it does not.
  std::function<CmaProbe()> probe_cma{};
  // Each worker's stdout is a pseudo-terminal (--stdout-tty: auto gives one
  // to a native program linked with an MPI library).
  bool stdout_tty = false;
};

// 16 random hex digits (getrandom; the pid and the clock where it fails).
std::string new_job_id();

// Fills `self`'s host name, advertised address (--local-addr; one node:
// 127.0.0.1, with no resolver call; else the one its
// packets to node 0 at `master_addr` leave from, else its host name's) and
// the interface holding it. Warns when a job across hosts would advertise a
// loopback address.
void find_own_address(const Config& config, const std::string& master_addr, NodeIdentity& self);

// The interface this host's packets to `peer_addr` leave from; "" if none.
std::string interface_towards(const std::string& peer_addr);

// This host's addresses other hosts may dial: every non-loopback one, else loopback.
std::vector<std::string> dialable_addrs();

// Whether `name` can ever be a host: a numeric address, or a name of RFC
// 1123 labels (letters, digits, '-', '_', not starting or ending with '-';
// 63 bytes a label, 253 in all) outside the reserved .invalid domain.
bool plausible_host(const std::string& name);

// Waits until --master-addr resolves: a name that exists only once node 0
// runs (a Kubernetes headless service's pod, a DNS entry being created) is
// retried with back-off (100 ms doubling to 2 s), saying what it waits for,
// until --rdzv-timeout; then exit 3. A name that can never be valid is a
// UsageError at once. `sleep_until` waits (it may throw: a stop signal);
// `resolve` returns getaddrinfo's code for a name (0: it resolves).
using SleepUntil = std::function<void(std::chrono::steady_clock::time_point)>;
using Resolve = std::function<int(const std::string& name)>;
void wait_for_master_name(const Config& config, const SleepUntil& sleep_until,
                          const Resolve& resolve = {});

// This program image's peak resident set in KiB (VmHWM).
long peak_rss_kib();

}  // namespace ddplaunch
