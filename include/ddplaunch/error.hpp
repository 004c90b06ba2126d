// Errors that end a ddplaunch run, and the exit codes they map to.
// Exceptions are thrown only for conditions that end the run; main() catches
// them once and turns them into a one-line message plus an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace ddplaunch {

// The launcher's own exit codes. A job that ran to the end exits with the
// root-cause worker's code instead (or 128+N when it died of signal N).
inline constexpr int k_exit_ok = 0;
inline constexpr int k_exit_internal = 1;    // a bug or an unexpected system error
inline constexpr int k_exit_usage = 2;       // bad command line or environment value
inline constexpr int k_exit_rendezvous = 3;  // rendezvous failed: timeout, mismatch, conflict
inline constexpr int k_exit_node_lost = 4;   // the store or another node went away mid-job
inline constexpr int k_exit_unhealthy = 5;   // this node failed its health check (--health-check)
// The job was preempted (--preempt-signal): its ranks were told to
// checkpoint and exit. EX_TEMPFAIL: a wrapper script may requeue it.
inline constexpr int k_exit_preempted = 75;
inline constexpr int k_exit_cannot_execute = 127;  // the worker program could not be executed

// An error that ends the run with a specific exit code and a message meant
// for the user (one line, saying what to do).
class LaunchError : public std::runtime_error {
 public:
  LaunchError(int exit_code, const std::string& message)
      : std::runtime_error(message), m_exit_code(exit_code) {}
  int exit_code() const { return m_exit_code; }

 private:
  int m_exit_code;
};

// Bad input from the user: exit code 2.
class UsageError : public LaunchError {
 public:
  explicit UsageError(const std::string& message) : LaunchError(k_exit_usage, message) {}
};

}  // namespace ddplaunch
