// Spawner: how the agent starts and stops its workers (ninja's CommandRunner
// idea): the real ProcessSpawner below, or a fake in the agent's unit tests.
// ProcessSpawner owns one Child per worker (the Driver moves their pipes into
// its StreamPump and reaps them) and the debuggers it starts through the
// ChildStarter. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "env/launch_spec.hpp"
#include "proc/child.hpp"
#include "supervise/exit_info.hpp"

namespace ddplaunch {

class Spawner {
 public:
  virtual ~Spawner() = default;
  // Starts every worker, in order, and returns their pids. Either all start
  // or none is left running: throws SpawnError (exit 127) when one cannot be
  // executed.
  virtual std::vector<pid_t> spawn(const std::vector<WorkerSpec>& workers) = 0;
  // Sends `sig` to worker `local_rank`'s process group.
  virtual void signal(int local_rank, int sig) = 0;
  // The job is over here: SIGKILL every worker's process group and every
  // process that escaped them (reparented to the launcher, a subreaper).
  virtual void kill_all() = 0;
  // Starts a debugger (eu-stack, else gdb, else cuda-gdb, the one NVIDIA's
  // CUDA images ship; found on PATH) that prints the native stack of every
  // thread of worker `local_rank` into that worker's own stderr pipe, so the
  // stacks reach its log, the console and the report. false when none is installed or it could not
  // start. The owner learns when it ends (ProcessSpawner::debugger_of()).
  virtual bool dump_stacks(int local_rank) {
    (void)local_rank;
    return false;
  }
  // `ddplaunch stacks`: the first of `candidates` (debugger command lines,
  // found on PATH) that starts, for worker `local_rank`, printing into
  // `output_path`, in the launcher's process group: its pid and which
  // candidate it is; nullopt when none is installed. The owner learns when
  // it ends (ProcessSpawner::debugger_of()), and may end it sooner
  // (stop_debugger()).
  struct Debugger {
    pid_t pid = -1;
    size_t which = 0;
  };
  virtual std::optional<Debugger> start_debugger(
      int local_rank, const std::vector<std::vector<std::string>>& candidates,
      const std::string& output_path) {
    (void)local_rank;
    (void)candidates;
    (void)output_path;
    return std::nullopt;
  }
  virtual void stop_debugger(pid_t pid) { (void)pid; }
  // Before a new round: kills whatever the last round left (a process that
  // escaped its worker's group deeper than kill_all()'s sweep reaches, found
  // by the job's marker) and waits up to `timeout` for it to be gone.
  // Returns the pids still alive then (empty: this node is clean); how many
  // it killed goes to `killed`.
  virtual std::vector<pid_t> reclaim(std::chrono::milliseconds timeout, int& killed) {
    (void)timeout;
    killed = 0;
    return {};
  }
};

// What the Driver asks of the spawner as the round's workers end: their
// Children (whose pipes go into its pump), which round they are of, who a
// reaped pid was, and the reaping itself. ProcessSpawner is the real one; a
// fake lets a unit test order the exits of two rounds in one batch.
class WorkerChildren : public Spawner {
 public:
  virtual std::vector<Child>& children() = 0;
  // One more each spawn() (a round of a restarted job): the children, and
  // their pipes, are new.
  virtual uint64_t generation() const = 0;
  // The local rank whose stacks the reaped `pid` printed (dump_stacks(),
  // start_debugger()), or nullopt when it was not one of those debuggers.
  virtual std::optional<int> debugger_of(pid_t pid) = 0;
  // The local rank of a worker's pid, if it is one of ours.
  virtual std::optional<int> local_rank_of(pid_t pid) const = 0;
  // A child of this process that ended, without waiting, or nullopt.
  virtual std::optional<std::pair<pid_t, ExitInfo>> reap() = 0;
};

class ProcessSpawner : public WorkerChildren {
 public:
  std::vector<pid_t> spawn(const std::vector<WorkerSpec>& workers) override;
  void signal(int local_rank, int sig) override;
  void kill_all() override;
  bool dump_stacks(int local_rank) override;
  std::optional<Debugger> start_debugger(int local_rank,
                                         const std::vector<std::vector<std::string>>& candidates,
                                         const std::string& output_path) override;
  void stop_debugger(pid_t pid) override;
  std::vector<pid_t> reclaim(std::chrono::milliseconds timeout, int& killed) override;
  // The job's DDPLAUNCH_AGENT_ID (JobGuard::marker()), for reclaim(); none:
  // reclaim() finds nothing.
  void set_marker(std::string marker) { m_marker = std::move(marker); }

  std::vector<Child>& children() override { return m_children; }
  std::optional<int> debugger_of(pid_t pid) override;
  uint64_t generation() const override { return m_generation; }
  // reap_any().
  std::optional<std::pair<pid_t, ExitInfo>> reap() override;
  // A child of the launcher that is not the job's (the JobGuard's process):
  // never swept.
  void spare(pid_t pid) { m_spared = pid; }
  std::optional<int> local_rank_of(pid_t pid) const override;

 private:
  std::vector<Child> m_children;
  uint64_t m_generation = 0;
  pid_t m_spared = -1;
  std::string m_marker;
  std::vector<std::pair<Child, int>> m_debuggers;  // debugger, local rank
};

}  // namespace ddplaunch
