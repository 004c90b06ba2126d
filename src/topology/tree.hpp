// The tree of agents: each node's parent and children by node rank, for a
// round of `nnodes` nodes and a fan-out. Node 0 is the root. Every subtree
// is a run of consecutive node ranks (node r's is [r, r + subtree)), its
// children the first ranks of its remaining ranks split into at most
// `fanout` runs as equal as can be (Slurm's message tree splits its node
// list the same way): data gathered up a subtree, each node's first, is in
// node order without sorting. Pure functions.
#pragma once

#include <vector>

namespace ddplaunch {

struct TreePlace {
  int node = 0;
  int parent = -1;            // -1: the root
  int parent_children = 0;    // how many children its parent has (0: the root)
  int subtree = 1;            // nodes in its subtree, itself included
  int depth = 0;              // 0: the root
  std::vector<int> children;  // in node order
  bool operator==(const TreePlace&) const = default;
};

// Node `node`'s place (0 <= node < nnodes; fanout >= 2).
TreePlace tree_place(int node, int nnodes, int fanout);

// Levels below the root of the deepest node (0 for one node).
int tree_height(int nnodes, int fanout);

// Whether a round of `nnodes` has nodes below node 0's children: then its
// verdict and `ddplaunch status` travel the tree (a smaller one is node 0
// and its children alone, the job's store serving them all).
inline bool tree_has_interior_nodes(int nnodes, int fanout) {
  return fanout >= 2 && nnodes > fanout + 1;
}

}  // namespace ddplaunch
