// Agent: runs this node's workers from a Plan and supervises them until the
// job ends. One thread, one epoll loop over the workers' output pipes, a
// signalfd (SIGCHLD and the signals it forwards), and the fds of an optional
// JobLink that connects it to the other nodes. The rules live in Supervisor;
// the Agent does the I/O. Not thread-safe; run() is called once.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddplaunch/config.hpp"
#include "ddplaunch/plan.hpp"
#include "ddplaunch/summary.hpp"

namespace ddplaunch {

// What another node decided about the job.
struct JobVerdict {
  int exit_code = 0;
  std::string message;                    // empty for success
  std::optional<RankOutcome> root_cause;  // the failing rank, when it was a worker
  bool success() const { return exit_code == 0 && message.empty(); }
};

// The agent's connection to the rest of a multi-node job (rendezvous.hpp
// implements it over the store). Single-node runs have none.
class JobLink {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~JobLink() = default;

  // Fds the agent watches for readability on the link's behalf.
  virtual std::vector<int> fds() const = 0;
  // One of fds() is readable (or hung up). Returns the job's verdict once known.
  virtual std::optional<JobVerdict> on_readable(int fd) = 0;
  // When on_tick() wants to run next (heartbeats, liveness checks).
  virtual TimePoint next_tick() const = 0;
  virtual std::optional<JobVerdict> on_tick(TimePoint now) = 0;
  // This node decided the job is over: a local root cause, or a stop signal.
  // Returns the verdict in force: ours, or an earlier one from another node.
  virtual JobVerdict publish_stop(const JobVerdict& verdict) = 0;
  // Every local worker succeeded; the verdict will arrive through on_readable().
  virtual void publish_local_success() = 0;
  // The job is over here: report this node's outcomes; the store host also
  // collects every node's (bounded wait) and returns them, ordered by rank.
  virtual std::vector<RankOutcome> finish(const std::vector<RankOutcome>& local) = 0;
};

class Agent {
 public:
  // `link` may be null (single node); it must outlive the Agent.
  Agent(const Config& config, Plan plan, JobLink* link);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  ~Agent();

  // Starts the workers, supervises them, and returns the job's summary.
  // Throws SpawnError (exit 127) when a worker cannot be executed.
  JobSummary run();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace ddplaunch
