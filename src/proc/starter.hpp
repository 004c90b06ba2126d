// ChildStarter: how the launcher starts a process that is not a worker: a
// node's agent (here, or over ssh), a subtree's root, a debugger printing a
// worker's stacks. One place for what that takes: the program found on PATH
// unless it names a path (posix_spawnp), the signals reset as in a worker
// (posix::signals_to_reset(), with an empty mask), stdin and the output as
// asked, a process group of its own unless asked otherwise, and a Child that
// owns it (killed and reaped if it is dropped unreaped). Workers and the
// health check start with spawn_workers() (proc/spawn.hpp), into the job's
// cgroup. An interface so that the launching command's unit tests start
// fake children. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "proc/child.hpp"
#include "supervise/exit_info.hpp"

namespace ddplaunch {

struct ChildStart {
  std::vector<std::string> argv;
  // Its stdin: a pipe whose write end (non-blocking) is Child::in(); else /dev/null.
  bool stdin_pipe = false;
  // Where its stdout and stderr go: pipes read (non-blocking) through
  // Child::out() and Child::err(); or, when set, this file opened for writing (stderr joins
  // stdout), and Child::out()/err() stay invalid.
  std::string output_path;
  // Its own process group (Child::signal() reaches all of it); else the launcher's.
  bool own_group = true;
};

class ChildStarter {
 public:
  virtual ~ChildStarter() = default;
  // Starts `spec`. Throws LaunchError (exit 127) when it cannot be executed,
  // naming the program and the reason.
  virtual Child start(const ChildStart& spec) = 0;
  // A child of this process that ended, without waiting (reap_any()), or nullopt.
  virtual std::optional<std::pair<pid_t, ExitInfo>> reap() = 0;
};

class ProcessStarter : public ChildStarter {
 public:
  Child start(const ChildStart& spec) override;
  std::optional<std::pair<pid_t, ExitInfo>> reap() override;
};

}  // namespace ddplaunch
