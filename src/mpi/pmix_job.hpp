// PmixJob: what a node's PMIx server tells the MPI library of the job it is
// part of, derived from ddplaunch's layout: the namespace, which ranks live on
// which node, and each node's name. Also the store keys a fence uses. Pure:
// no system calls; unit-tested in tests/unit/test_pmix_job.cpp.
#pragma once

#include <string>
#include <vector>

#include "topology/topology.hpp"

namespace ddplaunch {

struct PmixJob {
  std::string nspace;  // pmix_nspace(): new each round
  int node_rank = 0;   // this node
  int world_size = 1;
  // By node rank: its first rank and its rank count (ranks are contiguous).
  std::vector<int> first_rank;
  std::vector<int> nproc;
  // By node rank: the name the node map gives it. A host name, made unique
  // when several nodes share one host (loopback jobs): "host", "host.n1".
  std::vector<std::string> hosts;
  // Several nodes of this job run on one host (each has its own server).
  bool cohosted = false;
  // The ranks of every node of the job on this node's host (this node's
  // alone where the other nodes' host names are not known).
  int host_ranks = 0;
  // The tree of agents' fan-out (the plan's); 0: fences among every node go
  // through the job's store alone.
  int tree_fanout = 0;

  int nnodes() const { return static_cast<int>(nproc.size()); }
  int local_size() const { return nproc.at(static_cast<size_t>(node_rank)); }
  int local_first() const { return first_rank.at(static_cast<size_t>(node_rank)); }
  // The node holding `rank`, or -1 outside the job.
  int node_of(int rank) const;
  // PMIX_NODE_MAP's input: "a,b,c".
  std::string node_list() const;
  // PMIX_PROC_MAP's input: "0,1;2,3" (node by node).
  std::string proc_list() const;
  // PMIX_LOCAL_PEERS: this node's ranks, "2,3".
  std::string local_peers() const;
};

// The namespace name for a run and round, "ddplaunch.<run id>.<job id>.<round>.<restarts>":
// unique on a host among the jobs running there even where every one's run id
// is the default "none" (Open MPI derives its job id, and from it its
// shared-memory and session file names, from it). At most PMIx's 255 bytes:
// the ids cut and anything but [A-Za-z0-9_-] made '_' so the name stays a name.
std::string pmix_nspace(const std::string& run_id, const std::string& job_id, int round,
                        int restarts);

// `hosts`: each node's host name by node rank where known (Topology::hosts);
// a node whose name is unknown is called "node<N>".
PmixJob make_pmix_job(const JobLayout& layout, const std::vector<std::string>& hosts);

// The store keys of one fence of `nspace` among `nodes` (sorted node ranks):
// every participant's record, the arrival counter, and the "all in" flag.
// `signature` names the participant set ("all" for the whole namespace);
// `seq` counts the fences with that signature, the same on every node.
struct FenceKeys {
  std::vector<std::string> records;  // by position in `nodes`
  std::string counter;
  std::string done;
  std::string read;  // counts the nodes done with the result: the last deletes the fence's keys
};
FenceKeys fence_keys(const std::string& nspace, const std::string& signature, long seq,
                     const std::vector<int>& nodes);

}  // namespace ddplaunch
