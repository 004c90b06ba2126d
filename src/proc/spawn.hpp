// Starting worker processes (ninja's subprocess-posix and folly's
// Subprocess habits). Every worker gets its own process group (but rank 0 of
// a launcher in the terminal's foreground, which stays in the launcher's so
// that it may read the terminal), dies with the launcher (PR_SET_PDEATHSIG),
// inherits only fds 0, 1 and 2 (and 3, the progress pipe, with
// --hang-timeout), and receives an envp built by the launcher. Workers start
// with clone3() into the job's cgroup (proc/clone3.hpp), else vfork(); an
// exec failure is known before the next worker starts: a missing program is
// a spawn error, never a mystery exit 127. A clone3 that fails for want of
// processes or memory is that worker's spawn error; any other failure
// switches every later start to vfork, the launcher moving into the cgroup. From eight workers on,
// on two CPUs or more, a second thread starts half of them (the upper ranks): while one thread
// waits for its child's execve, the other starts the next. That thread lives
// until the job's last round is over (retire_spawn_thread()), because a
// worker's PR_SET_PDEATHSIG fires when the thread that started it ends.
// Called from the launcher's loop thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "config/launch_error.hpp"
#include "env/launch_spec.hpp"
#include "proc/child.hpp"

namespace ddplaunch {

// "cannot execute 'X': <reason>": exit code 127.
class SpawnError : public LaunchError {
 public:
  explicit SpawnError(const std::string& message) : LaunchError(k_exit_cannot_execute, message) {}
};

// Resolves `program` like execvp would, against the PATH in `env` (a program
// with a '/' is used as given). nullopt when no executable file is found.
std::optional<std::string> find_program(const std::string& program, const EnvMap& env);

// Starts every worker of `workers` (the first alone, then each half in
// order on its thread) and returns them in the order given; their pipes'
// read ends are non-blocking and close-on-exec. Either all start, or none is
// left running: on the first exec failure both threads stop, the started
// ones are killed and reaped (by their Child owners) and SpawnError is thrown.
std::vector<Child> spawn_workers(const std::vector<WorkerSpec>& workers);

// Ends the second spawning thread once it is idle, without waiting for it:
// call once the job's last round is over and its workers are reaped (a
// later spawn_workers() starts a new one). Its exit then overlaps the
// launcher's last steps instead of delaying the launcher's own exit.
void retire_spawn_thread();

// Reserves seven low fd numbers that every worker's stdin, stdout, stderr and
// progress fd pass through as it starts (stdin's shared, the others one set
// per spawning thread), so that a child copies only the
// fds below them instead of the launcher's whole table (thousands of pipes
// with thousands of workers). Also marks every inherited fd close-on-exec.
// Call once at start, before the fds that grow with the workers.
void reserve_spawn_slots();

// Workers start in the cgroup `cgroup_fd` (a directory fd; the JobGuard's),
// cloned straight into it with clone3(CLONE_INTO_CGROUP) where the kernel and
// architecture allow, so the launcher never migrates. Where they do not (or
// with cgroup_fd -1), the launcher moves itself in through `procs_path`
// (cgroup.procs) once, so that every worker is born there. Call once, before
// any thread.
void spawn_into_cgroup(int cgroup_fd, const std::string& procs_path);

// For the unit tests, which force each fallback path: failures to inject
// (set while no worker starts; this also resets the paths settled so far
// and the counts), and which paths the starts took since.
struct SpawnFaults {
  int clone3_errno = 0;        // clone3 fails with this errno, every time
  bool unshare_fails = false;  // the child's CLOSE_RANGE_UNSHARE fails
};
struct SpawnPaths {
  int clone3 = 0;            // children started with clone3
  int vfork = 0;             // ... with vfork
  int unshare_retries = 0;   // children started again with a copied fd table
  int cgroup_moves = 0;      // times the launcher moved itself into the job's cgroup
  bool clone3_on = false;    // clone3 is still tried
  bool share_files = false;  // children still share the fd table until they unshare
};
void set_spawn_faults_for_tests(const SpawnFaults& faults);
SpawnPaths spawn_paths_for_tests();

// Raises this process's soft RLIMIT_NOFILE to its hard limit (a launcher
// holds two pipes per worker and, on node 0, a connection per agent), and
// remembers the soft limit the user had: every worker started afterwards gets
// that one back. Call once at start, before any thread.
void raise_fd_limit_for_launcher();

}  // namespace ddplaunch
