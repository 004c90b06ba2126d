#include "topology/tree.hpp"

#include <algorithm>

namespace ddplaunch {

namespace {

// The runs [first, first + size) that the nodes after `lo` in its subtree
// of `size` split into: their first ranks and sizes.
struct Run {
  int first;
  int size;
};
std::vector<Run> child_runs(int lo, int size, int fanout) {
  std::vector<Run> runs;
  const int rest = size - 1;
  const int count = std::min(fanout, rest);
  int first = lo + 1;
  for (int i = 0; i < count; ++i) {
    const int run = rest / count + (i < rest % count ? 1 : 0);
    runs.push_back(Run{first, run});
    first += run;
  }
  return runs;
}

}  // namespace

TreePlace tree_place(int node, int nnodes, int fanout) {
  TreePlace place;
  place.node = node;
  int lo = 0;
  int size = nnodes;
  while (lo != node) {
    const auto runs = child_runs(lo, size, fanout);
    const auto it = std::find_if(runs.begin(), runs.end(),
                                 [node](const Run& r) { return node < r.first + r.size; });
    place.parent = lo;
    place.parent_children = static_cast<int>(runs.size());
    lo = it->first;
    size = it->size;
    ++place.depth;
  }
  place.subtree = size;
  for (const Run& r : child_runs(lo, size, fanout)) {
    place.children.push_back(r.first);
  }
  return place;
}

int tree_height(int nnodes, int fanout) {
  // Down the largest run of each split: the first, ceil((size - 1) / fanout).
  int height = 0;
  for (int size = nnodes; size > 1; ++height) {
    size = (size - 1 + fanout - 1) / fanout;
  }
  return height;
}

}  // namespace ddplaunch
