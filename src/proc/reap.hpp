// Reaping and the stray-process sweep: collecting exited children, becoming
// the subreaper of the workers' descendants, and killing those that escaped
// their worker's process group. Called from the launcher's one thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <utility>

#include "supervise/exit_info.hpp"

namespace ddplaunch {

// Reaps one exited child without blocking: (pid, how it ended), or nullopt.
std::optional<std::pair<pid_t, ExitInfo>> reap_any();

// Makes orphaned descendants reparent to the launcher, so they can be found
// and killed at the end (PR_SET_CHILD_SUBREAPER).
void become_subreaper();

// SIGKILLs every remaining child of this process (descendants that left their
// worker's process group and were reparented to us) and returns how many.
// Call only after every worker has been reaped. `spare`: a child that is not
// the job's (the JobGuard's process).
int kill_stray_children(pid_t spare = -1);

}  // namespace ddplaunch
