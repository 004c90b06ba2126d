#include "agent/python_stacks.hpp"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "log.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

using json = nlohmann::json;

bool catches_signal(pid_t pid, int signal) {
  const auto text = posix::read_small_file("/proc/" + std::to_string(pid) + "/status", 8192);
  const size_t at = text ? text->find("\nSigCgt:") : std::string::npos;
  if (at == std::string::npos || signal < 1 || signal > 64) {
    return false;
  }
  const unsigned long long mask = std::strtoull(text->c_str() + at + 8, nullptr, 16);
  return (mask >> (signal - 1)) & 1U;
}

std::string python_stacks_dir(const std::string& job_dir) {
  return job_dir + "/python-stacks";
}

std::string python_stacks_hook(int signal, const std::string& dump_dir) {
  // A JSON string is a Python string literal.
  const std::string dir = json(dump_dir).dump(-1, ' ', true, json::error_handler_t::replace);
  return fmt::format(R"(# Written by ddplaunch for --python-stacks-signal; removed with the job.
# `ddplaunch stacks` sends this process signal {0} and reads every thread's
# Python stack from {1}/<pid>. Then the sitecustomize this one hides runs.
def _ddplaunch_python_stacks():
    import os
    import sys

    try:
        import atexit
        import faulthandler

        mine = {{}}  # this process's file: a forked child makes its own

        def arm():
            try:
                mine["pid"] = os.getpid()
                mine["path"] = os.path.join({1}, str(mine["pid"]))
                dump = open(mine["path"], "a")
                faulthandler.register({0}, file=dump, all_threads=True, chain=False)
            except (OSError, RuntimeError, ValueError):
                pass

        def disarm():
            if mine.get("pid") == os.getpid():
                try:
                    os.remove(mine["path"])
                except OSError:
                    pass

        arm()
        atexit.register(disarm)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=arm)
    except Exception:
        pass
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if isinstance(p, str) and os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_ddplaunch_python_stacks()
del _ddplaunch_python_stacks
)",
                     signal, dir);
}

bool arm_python_stacks(int signal, const std::string& job_dir, EnvMap& worker_env) {
  const std::string hook_dir = job_dir + "/python";
  const std::string dump_dir = python_stacks_dir(job_dir);
  std::error_code ec;
  bool ok = !job_dir.empty() && std::filesystem::create_directory(hook_dir, ec) &&
            std::filesystem::create_directory(dump_dir, ec);
  if (ok) {
    std::ofstream out(hook_dir + "/sitecustomize.py", std::ios::trunc);
    out << python_stacks_hook(signal, dump_dir);
    out.close();
    ok = static_cast<bool>(out);
  }
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
