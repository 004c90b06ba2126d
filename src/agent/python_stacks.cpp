#include "agent/python_stacks.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "config/integer.hpp"
#include "embedded.hpp"
#include "log.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

bool catches_signal(pid_t pid, int signal) {
  const auto text = posix::read_small_file("/proc/" + std::to_string(pid) + "/status", 8192);
  constexpr std::string_view k_field = "\nSigCgt:";
  const size_t at = text ? text->find(k_field) : std::string::npos;
  if (at == std::string::npos || signal < 1 || signal > 64) {
    return false;
  }
  std::string_view value = std::string_view(*text).substr(at + k_field.size());
  value = value.substr(0, value.find('\n'));
  value.remove_prefix(std::min(value.size(), value.find_first_not_of(" \t")));
  const auto mask = parse_hex(value);
  return mask && ((*mask >> (signal - 1)) & 1U) != 0;
}

std::string python_stacks_dir(const std::string& job_dir) {
  return job_dir + "/python-stacks";
}

bool arm_python_stacks(int signal, const std::string& job_dir, EnvMap& worker_env) {
  const std::string hook_dir = job_dir + "/python";
  const std::string dump_dir = python_stacks_dir(job_dir);
  std::error_code ec;
  bool ok = !job_dir.empty() && std::filesystem::create_directory(hook_dir, ec) &&
            std::filesystem::create_directory(dump_dir, ec);
  // The hook as it is in the tree; what it needs to know, beside it.
  const auto write = [](const std::string& path, std::string_view text) {
    std::ofstream out(path, std::ios::trunc | std::ios::binary);
    out << text;
    out.close();
    return static_cast<bool>(out);
  };
  ok = ok && write(hook_dir + "/sitecustomize.py", embedded::python_stacks_hook()) &&
       write(hook_dir + "/stacks.conf", std::to_string(signal) + "\n" + dump_dir);
  if (!ok) {
    log::warn(
        "--python-stacks-signal: cannot write {}/sitecustomize.py ({}): `ddplaunch stacks` "
        "shows Python frames only through gdb",
        hook_dir, ec ? ec.message() : std::string(std::strerror(errno)));
    return false;
  }
  std::string& path = worker_env["PYTHONPATH"];
  path = path.empty() ? hook_dir : hook_dir + ":" + path;
  return true;
}

}  // namespace ddplaunch
