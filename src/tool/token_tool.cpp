#include "tool/token_tool.hpp"

#include <cstdio>

#include "config/launch_error.hpp"
#include "posix/secret_file.hpp"
#include "rendezvous/store_host.hpp"

namespace ddplaunch {

namespace {

constexpr const char* k_token_usage =
    "usage: ddplaunch token init [--force] | ddplaunch token path\n"
    "  init    create the job token file every multi-node job of yours uses when no\n"
    "          --rdzv-token-file or DDPLAUNCH_RDZV_TOKEN is given (mode 0600; on a\n"
    "          shared home directory every node then has it); --force replaces it\n"
    "  path    print where that file is\n";

}  // namespace

int run_token_command(const std::vector<std::string>& args, const EnvMap& env) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(k_token_usage, args.empty() ? stderr : stdout);
    return args.empty() ? k_exit_usage : k_exit_ok;
  }
  const std::string path = user_token_file(env);
  if (path.empty()) {
    throw UsageError("token: neither XDG_CONFIG_HOME nor HOME is set: set one");
  }
  if (args[0] == "path" && args.size() == 1) {
    std::printf("%s\n", path.c_str());
    return k_exit_ok;
  }
  if (args[0] == "init" && (args.size() == 1 || (args.size() == 2 && args[1] == "--force"))) {
    posix::create_secret_file(path, args.size() == 2);
    std::printf(
        "ddplaunch: wrote a new job token to %s (mode 0600); every multi-node job of yours now "
        "uses it when no other token is given; nodes that do not share this home directory need "
        "a copy\n",
        path.c_str());
    return k_exit_ok;
  }
  throw UsageError(
      "token: unknown arguments: give `ddplaunch token init [--force]` or "
      "`ddplaunch token path`");
}

}  // namespace ddplaunch
