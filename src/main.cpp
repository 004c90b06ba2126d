// ddplaunch: the edge. Parses the command line, runs the launcher, and turns
// any error that ends the run into one line on stderr and an exit code.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <system_error>
#include <vector>

#include "ddplaunch/cli.hpp"
#include "ddplaunch/env_detect.hpp"
#include "ddplaunch/error.hpp"
#include "ddplaunch/launcher.hpp"
#include "log.hpp"

int main(int argc, char** argv) {
  using namespace ddplaunch;
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    CliResult cli = parse_command_line(args);
    if (cli.print_and_exit) {
      std::fputs(cli.print_and_exit->c_str(), stdout);
      return k_exit_ok;
    }
    log::setup(cli.config.log_level);
    return run_launcher(cli.config, capture_environment(environ));
  } catch (const LaunchError& e) {
    std::fprintf(stderr, "ddplaunch: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "ddplaunch: error: %s\n", e.what());
    return k_exit_internal;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddplaunch: internal error: %s\n", e.what());
    return k_exit_internal;
  }
}
