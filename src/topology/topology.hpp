// The job's shape: every node's worker count (run-length, by node rank), and
// for the nodes an agent knows, their rank, host name, address, first rank
// and a slot per worker for per-worker data. The store host knows every node;
// another agent learns the sizes and its own node rank through the store at
// rendezvous, so what it reads does not grow with the job (every node, when
// workers reserve ports: TF_CONFIG lists them all). layout_of() computes a
// node's view of it, for one node and for many. Plain values and pure
// functions.
#pragma once

#include <string>
#include <vector>

namespace ddplaunch {

// One worker's place in the job; the room where per-worker data (such as a
// TensorFlow worker's own port) is added.
struct WorkerSlot {
  int rank = 0;
  int local_rank = 0;
  int port = 0;  // a port reserved on its node for it (--env-style tf); 0: none
  bool operator==(const WorkerSlot&) const = default;
};

struct NodeEntry {
  int node_rank = 0;
  std::string host;  // its host name
  std::string addr;  // the address it advertised (--local-addr, else its host name's)
  int nproc = 1;     // its workers
  int first_rank = 0;
  std::vector<WorkerSlot> workers;  // by local rank
  bool operator==(const NodeEntry&) const = default;
};

// A spare node (one that waited, rendezvoused and health-checked, while an
// elastic job ran with --nnodes MAX) that a round took in the place of a
// node the last round lost: it gets that node's rank.
struct NodeReplacement {
  int node_rank = 0;
  std::string lost;   // the lost node's host
  std::string spare;  // the spare's host
  bool operator==(const NodeReplacement&) const = default;
};

// Consecutive node ranks with the same number of workers.
struct SizeRun {
  int nproc = 1;
  int count = 1;
  bool operator==(const SizeRun&) const = default;
};

struct Topology {
  int world_size = 0;
  std::string master_addr;     // the workers' MASTER_ADDR
  int master_port = 0;         // the workers' MASTER_PORT (not the store's port)
  std::vector<SizeRun> sizes;  // every node's worker count, by node rank
  // By node rank: every node where all are known (the store host, a
  // one-node job, workers with reserved ports), else only this agent's own.
  std::vector<NodeEntry> nodes;
  // Every node's host name by node rank, in Slurm's host-list syntax
  // ("gpu[0001-1024]"), where the plan carried them (node 0's plan does when
  // the names fold into a short list); empty otherwise. Expanded only where
  // the PMIx server needs its node map (a round's start), not by every node
  // that reads the plan.
  std::string host_list;
  // This launch of the job, the same on every node and unique among the jobs
  // running (node 0's random draw; a one-node job's own): what tells two
  // jobs apart where the user gave no --rdzv-id (the PMIx namespace). Empty:
  // unknown (the node's own is used).
  std::string job_id;
  // The tree of agents' fan-out (node 0's --tree-fanout decides for the job).
  int tree_fanout = 8;
  bool operator==(const Topology&) const = default;

  int nnodes() const;
  bool complete() const { return static_cast<int>(nodes.size()) == nnodes(); }
  const NodeEntry* find(int node_rank) const;
};

// Where this node's workers sit in the whole job, as its agent sees it.
struct JobLayout {
  int node_rank = 0;
  int nnodes = 1;
  int local_world_size = 1;         // workers on this node
  int world_size = 1;               // workers on every node
  int rank_offset = 0;              // global rank of this node's local rank 0
  std::vector<SizeRun> node_sizes;  // workers on each node, by node rank
  // "addr:port" of every worker, by rank, when each has a reserved port.
  std::vector<std::string> worker_endpoints;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // the workers' MASTER_PORT (not the store's port)
  std::string run_id = "none";
  std::string job_id;   // Topology::job_id
  int tree_fanout = 0;  // Topology::tree_fanout
  std::string role = "default";
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: the restarts used so far
  // The round (0, then one more each time the nodes meet again): equal to
  // restart_count unless an elastic job regrouped to admit a node.
  int round = 0;
  int max_restarts = 0;
  std::string hostname;
  // The interface holding this node's advertised address: the workers'
  // GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME unless set. Empty: leave unset.
  std::string socket_ifname;
};

// Orders `nodes` by node rank and fills in first ranks, worker slots, the
// sizes and the world size from each node's worker count.
void assign_ranks(Topology& topology);

// Node `node_rank`'s entry as `sizes` give it: its worker count, first rank
// and worker slots (host and address left empty). Throws std::out_of_range
// when there is no such node.
NodeEntry entry_from_sizes(const std::vector<SizeRun>& sizes, int node_rank);

// A job of `nnodes` nodes of `nproc` workers each, with this host at
// `node_rank` and the others unknown: one node's whole job, or --dry-run's
// placeholder for a job whose other nodes have not joined.
Topology uniform_topology(int nnodes, int nproc, int node_rank, const std::string& host,
                          const std::string& addr, const std::string& master_addr, int worker_port);

// Node `node_rank`'s view of the job. The job-wide labels (run id, role,
// restarts) are passed through.
JobLayout layout_of(const Topology& topology, int node_rank, const std::string& run_id,
                    const std::string& role, int max_restarts);

}  // namespace ddplaunch
