// JobGuard: no process of this node's job outlives the launcher, even when
// the launcher itself is SIGKILLed (the OOM killer, Slurm's final kill), and
// however deep a chain of setsid()ed descendants goes. The strongest
// mechanism available is used:
//   - a cgroup v2 of the job's own, created under the launcher's cgroup when
//     it may (root, or a delegated cgroup): every worker is cloned straight
//     into it (clone3's CLONE_INTO_CGROUP; where that is missing, the
//     launcher moves into it once), and cgroup.kill ends everything in it;
//   - always, a guard process (a child of the launcher, in its own process
//     group, ignoring terminal signals) that waits on a pipe: when the
//     launcher dies without saying "done", it kills the cgroup and every
//     process whose environment carries this launcher's DDPLAUNCH_AGENT_ID,
//     round after round until none is left.
// It also makes the job's private directory (the workers' error files) and
// removes it: the destructor at a normal end, the guard process when the
// launcher was killed, so nothing is left on disk either.
// At a normal end the destructor tells the guard "done"; once the launcher
// is gone (its pidfd says so) the guard kills whatever is left in the cgroup
// and removes it. Until then it only waits: it takes no CPU from a launcher
// starting or ending the job, and removes other launchers' stale cgroups last.
// Created once, early, before any thread exists.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddplaunch {

class JobGuard {
 public:
  // Never throws: a missing mechanism is said at debug level. `use_cgroup`
  // false: the guard process alone (DDPLAUNCH_GUARD=process).
  explicit JobGuard(bool use_cgroup = true);
  ~JobGuard();
  JobGuard(const JobGuard&) = delete;
  JobGuard& operator=(const JobGuard&) = delete;

  // The value of DDPLAUNCH_AGENT_ID every worker gets.
  const std::string& marker() const { return m_marker; }
  // The guard process, or -1.
  int guard_pid() const { return m_guard_pid; }
  // The job's private directory (temp_dir()/ddplaunch-job-XXXXXX); empty
  // when none could be made.
  const std::string& job_dir() const { return m_job_dir; }
  // "cgroup v2 (PATH) and a guard process", or "a guard process".
  std::string mechanism() const;

 private:
  void end_escaped() const;

  std::string m_marker;
  std::string m_cgroup;  // the job's cgroup directory; empty: none
  std::string m_job_dir;
  int m_job_dir_lock = -1;  // posix::JobDir's lock, held until this process ends
  int m_cgroup_fd = -1;     // kept open for the workers' clone3
  int m_pipe_fd = -1;       // the write end; its closing wakes the guard
  int m_guard_pid = -1;
};

// Kills every process (but this one) whose environment holds
// DDPLAUNCH_AGENT_ID=`marker`, round after round until none is found.
// Returns how many were killed.
int kill_marked_processes(const std::string& marker);
// One pass of that: the pids found (and sent SIGKILL). A zombie has no
// environment left: it is not found.
std::vector<pid_t> kill_marked_once(const std::string& marker);

}  // namespace ddplaunch
