// The hosts of a job started from one command: `--hosts node0:4,node1:4`
// (mpirun's -H) and `--hostfile FILE` in mpirun's and DeepSpeed's format
// ("node0 slots=4", comments after '#', blank lines). Pure: the file's text
// is handed in.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddplaunch {

// One host and, when the list says, how many workers it runs.
struct HostSlots {
  std::string host;
  std::optional<int> slots;  // nullopt: --nproc-per-node (or its default) decides

  bool operator==(const HostSlots&) const = default;
};

// The most workers one host entry may name (the agent's own limit per node).
inline constexpr int k_max_slots = 4096;

// "a:4,b:4", "a,b", "a:2,a:2". A host named twice is one host with the
// slots added, a mention without a count counting one ("a,a" is a:2), as
// mpirun does. Throws UsageError naming `flag`.
std::vector<HostSlots> parse_host_list(std::string_view list, std::string_view flag);

// A hostfile's text: one host a line, "host", "host slots=N" or "host:N";
// max_slots=M is accepted and ignored (every slot is used); '#' starts a
// comment. Throws UsageError naming `path` and the line number.
std::vector<HostSlots> parse_hostfile(std::string_view text, std::string_view path);

}  // namespace ddplaunch
