#include "tool/check_tool.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <filesystem>

#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "node/health.hpp"

namespace ddplaunch {

namespace {

constexpr const char* k_check_usage =
    "usage: ddplaunch check [disk] [gpu] [strays] [--dir DIR]... [--port PORT]...\n"
    "  Runs this node's built-in health checks (all three when none is named), one\n"
    "  line each, failures last; exits 0 when none failed, 5 when one did.\n"
    "  disk    the working directory and each --dir can take a new file\n"
    "  gpu     the GPUs in CUDA_VISIBLE_DEVICES (else all) answer NVML; skipped\n"
    "          without NVML\n"
    "  strays  no other process of this user holds a GPU, and nobody listens on\n"
    "          any --port (the job's ports)\n";

const char* state_text(CheckResult::State s) {
  switch (s) {
    case CheckResult::State::k_ok:
      return "ok";
    case CheckResult::State::k_skipped:
      return "skipped";
    case CheckResult::State::k_failed:
      break;
  }
  return "FAILED";
}

}  // namespace

int run_check_command(const std::vector<std::string>& args, const EnvMap& env) {
  bool disk = false, gpu = false, strays = false;
  std::vector<std::string> dirs;
  std::vector<int> ports;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(k_check_usage, stdout);
      return k_exit_ok;
    }
    if ((a == "--dir" || a == "--port") && i + 1 < args.size()) {
      const std::string& v = args[++i];
      if (a == "--dir") {
        dirs.push_back(v);
      } else {
        const auto port = parse_integer_in(v, 1, 65535);
        if (!port) {
          throw UsageError("check --port: '" + v + "' is not a port from 1 to 65535");
        }
        ports.push_back(static_cast<int>(*port));
      }
    } else if (a == "disk") {
      disk = true;
    } else if (a == "gpu") {
      gpu = true;
    } else if (a == "strays") {
      strays = true;
    } else {
      throw UsageError("check: unknown argument '" + a +
                       "'; give disk, gpu, strays, --dir DIR or --port PORT (see ddplaunch check "
                       "--help)");
    }
  }
  if (!disk && !gpu && !strays) {
    disk = gpu = strays = true;
  }
  std::error_code ec;
  dirs.insert(dirs.begin(), std::filesystem::current_path(ec).string());
  std::vector<CheckResult> results;
  if (disk) {
    results.push_back(check_disk(dirs));
  }
  if (gpu) {
    results.push_back(check_gpus(env));
  }
  if (strays) {
    results.push_back(check_strays(ports));
  }
  bool failed = false;
  for (const bool failures : {false, true}) {
    for (const auto& r : results) {
      const bool f = r.state == CheckResult::State::k_failed;
      if (f == failures) {
        std::printf("%s: %s: %s\n", r.name.c_str(), state_text(r.state), r.detail.c_str());
        failed = failed || f;
      }
    }
  }
  std::fflush(stdout);
  return failed ? k_exit_unhealthy : k_exit_ok;
}

}  // namespace ddplaunch
