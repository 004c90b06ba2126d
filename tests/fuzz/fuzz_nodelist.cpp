// libFuzzer: Slurm's node lists and tasks-per-node values, as the
// environment hands them over. Only UsageError may come out, and never more
// hosts than the documented cap; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cluster/nodelist.hpp"
#include "ddplaunch/error.hpp"

using namespace ddplaunch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    if (expand_nodelist(in).size() > 1'000'000) {
      __builtin_trap();
    }
  } catch (const UsageError&) {
  }
  try {
    (void)expand_tasks_per_node(in);
  } catch (const UsageError&) {
  }
  return 0;
}
