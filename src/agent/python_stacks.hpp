// --python-stacks-signal's side of `ddplaunch stacks` (docs/STATUS.md):
// the sitecustomize.py that makes each Python process of the job answer a
// signal with every thread's stack, written into a file of its own, and
// whether a process catches that signal. StackCapture sends it and reads
// the file. Plain functions; thread-compatible.
#pragma once

#include <sys/types.h>

#include <string>

#include "config/env_map.hpp"

namespace ddplaunch {

// --python-stacks-signal: writes `job_dir`/python/sitecustomize.py
// (src/agent/sitecustomize.py, embedded) and stacks.conf beside it (the
// signal's number, then the directory), which make every Python process
// that reads them register faulthandler for
// `signal`, writing every thread's stack to python_stacks_dir(job_dir)/<its
// pid> (a child made by fork() gets its own file), and then runs the
// sitecustomize it hides, if any. That directory goes first on
// `worker_env`'s PYTHONPATH. False (and a warning) when it cannot be written.
bool arm_python_stacks(int signal, const std::string& job_dir, EnvMap& worker_env);
std::string python_stacks_dir(const std::string& job_dir);
// Whether `pid` catches `signal` (SigCgt in /proc/PID/status).
bool catches_signal(pid_t pid, int signal);

}  // namespace ddplaunch
