#include "ddplaunch/config.hpp"

namespace ddplaunch {

int StreamSelection::for_local_rank(int local_rank) const {
  auto it = per_local_rank.find(local_rank);
  return it == per_local_rank.end() ? all : it->second;
}

bool Config::console_allows(int rank, int local_rank) const {
  if (ranks_filter && !ranks_filter->contains(rank)) {
    return false;
  }
  if (local_ranks_filter && !local_ranks_filter->contains(local_rank)) {
    return false;
  }
  return true;
}

}  // namespace ddplaunch
