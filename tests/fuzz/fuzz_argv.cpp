// libFuzzer: the command line, as any user may type it. The input is split
// at NUL bytes into arguments; parsing and configuring may only end in a
// LaunchError (a usage error, exit 2) or a Config; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/cli.hpp"
#include "cluster/precedence.hpp"
#include "config/launch_error.hpp"

using namespace ddplaunch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.emplace_back();
    } else {
      args.back() += static_cast<char>(data[i]);
    }
  }
  try {
    const CommandLine command_line = parse_command_line(args);
    if (!command_line.print_and_exit) {
      (void)configure(command_line, EnvMap{});
    }
  } catch (const LaunchError&) {
  }
  return 0;
}
