// Starting and stopping worker processes (ninja's subprocess-posix and folly's
// Subprocess habits). Every worker gets its own process group, dies with the
// launcher (PR_SET_PDEATHSIG), inherits only fds 0, 1 and 2, and receives an
// envp built by the launcher. Workers start with vfork(); an exec failure is
// known before the next worker starts: a missing program is a spawn error,
// never a mystery exit 127.
// Functions here are called from the launcher's one thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddplaunch/error.hpp"
#include "ddplaunch/exit_info.hpp"
#include "ddplaunch/plan.hpp"

namespace ddplaunch {

// A started worker. The launcher owns the read ends of its stdout and stderr
// pipes (non-blocking, close-on-exec); ownership passes with the value.
struct SpawnedWorker {
  pid_t pid = -1;  // also its process group id
  int out_fd = -1;
  int err_fd = -1;
};

// "cannot execute 'X': <reason>": exit code 127.
class SpawnError : public LaunchError {
 public:
  explicit SpawnError(const std::string& message)
      : LaunchError(k_exit_cannot_execute, message) {}
};

// Resolves `program` like execvp would, against the PATH in `env` (a program
// with a '/' is used as given). nullopt when no executable file is found.
std::optional<std::string> find_program(const std::string& program, const EnvMap& env);

// Starts every worker of `workers` in order. Either all start, or none is
// left running: on the first exec failure the started ones are killed and
// reaped and SpawnError is thrown.
std::vector<SpawnedWorker> spawn_workers(const std::vector<WorkerSpec>& workers);

// Sends `sig` to the process group `pgid`; a group that is gone is not an error.
void signal_group(pid_t pgid, int sig);

// Reaps one exited child without blocking: (pid, how it ended), or nullopt.
std::optional<std::pair<pid_t, ExitInfo>> reap_any();

// Makes orphaned descendants reparent to the launcher, so they can be found
// and killed at the end (PR_SET_CHILD_SUBREAPER).
void become_subreaper();

// SIGKILLs every remaining child of this process (descendants that left their
// worker's process group and were reparented to us) and returns how many.
// Call only after every worker has been reaped.
int kill_stray_children();

}  // namespace ddplaunch
