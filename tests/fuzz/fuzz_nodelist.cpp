// libFuzzer: Slurm's node lists and tasks-per-node values, as the
// environment hands them over. Only UsageError may come out, and never more
// hosts than the documented cap; count_nodelist() must agree with it (the
// same count, the same refusal), and compress_nodelist() must give back a
// list naming the same hosts; anything else is a bug. Lists the count
// finds longer than 20,000 names are not expanded.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cluster/nodelist.hpp"
#include "config/launch_error.hpp"

using namespace ddplaunch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    (void)expand_tasks_per_node(in);
  } catch (const UsageError&) {
  }
  std::optional<size_t> counted;
  try {
    counted = count_nodelist(in);
  } catch (const UsageError&) {
  }
  // Expanding a list of near a million names under the sanitizers takes
  // half a second; past this size the count alone is checked (it is below
  // the cap), so the fuzzer spends its time on the grammar.
  if (counted && *counted > 20'000) {
    return 0;
  }
  try {
    const auto hosts = expand_nodelist(in);
    if (hosts.size() > 1'000'000 || counted != hosts.size()) {
      __builtin_trap();
    }
    // Folding them again gives a list that names the same hosts in order.
    if (hosts.size() <= 10'000) {
      const std::string folded = compress_nodelist(hosts);
      if (!folded.empty() && expand_nodelist(folded) != hosts) {
        __builtin_trap();
      }
    }
  } catch (const UsageError&) {
    if (counted) {
      __builtin_trap();  // counted what expanding refuses
    }
  }
  return 0;
}
