// The plan of a job started from one command (--hosts, --hostfile,
// --launcher local): which agent runs where, with which command line. Node 0
// is the first host, or the one --master-addr names; each host's slots
// become its --nproc-per-node unless --nproc-per-node was given. At most
// --fanout hosts are reached from here: above that, the rest go in
// contiguous groups, each started by its first host's ddplaunch (a tree, as
// Open MPI's launcher does). Pure: what it needs of the system is handed in.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/command_line.hpp"
#include "config/config.hpp"

namespace ddplaunch {

// What the plan needs to know of this host and this run.
struct PlanContext {
  std::vector<HostSlots> hosts;  // --hosts or the hostfile's, in the given order
  // Per host: this machine, where the agent starts directly, without ssh and
  // outside the --fanout count. With --launcher local only the first host
  // is: the others are started directly too, but as if each were a
  // connection (counted, grouped into subtrees, delayed in a simulation).
  std::vector<bool> is_local;
  std::string self_path;  // this binary
  std::string cwd;        // this directory
  int master_port = 0;    // the store's port on node 0
  // This command is itself a subtree's root (--subtree): hosts[0] is this
  // host, and node ranks start at `first_node_rank`.
  int first_node_rank = 0;
  int nnodes = 0;           // the whole job's node count (0: hosts.size())
  std::string master_addr;  // node 0's address as every agent dials it (empty: node 0's name)
  // Node 0 is started elsewhere and the user chose no port: its agent picks
  // one (--pick-store-port), which reaches the others in their header.
  bool node0_picks_store_port = false;
};

// One process the launching command starts.
struct AgentStart {
  int node_rank = 0;
  std::string host;
  int hosts = 1;            // how many nodes it starts: 1 for an agent, more for a subtree's root
  bool local = false;       // started directly, without ssh
  bool connection = false;  // one of the --fanout connections (ssh, or simulated)
  std::vector<std::string> argv;  // ddplaunch ..., or ssh ... HOST 'cd DIR && exec ddplaunch ...'
};

struct HostsPlan {
  std::vector<AgentStart> starts;
  int nnodes = 0;
  std::string master_addr;
  std::string master_host;  // node 0's host as listed
};

// The hosts in node order: node 0 first. Throws UsageError for options that
// contradict a host list (--node-rank, a --nnodes other than the count).
std::vector<HostSlots> order_hosts(const Config& config, std::vector<HostSlots> hosts);

// How the launching command names what `start` starts: "node 2 (h3, over
// ssh)", "nodes 4-7 (through h5)".
std::string describe_start(const AgentStart& start);

// Every process to start. Throws UsageError.
HostsPlan plan_hosts(const Config& config, const CommandLine& command_line,
                     const PlanContext& context);

// `word` quoted for a POSIX shell (what ssh hands the remote command line to).
std::string shell_quote(std::string_view word);

// The default --prefix of a job started from one command: node-aware.
inline constexpr std::string_view k_hosts_prefix = "[{host} rank {rank}]: ";

}  // namespace ddplaunch
