// ddplaunch's exit codes, for the scripts and programs that run it: each
// condition that ends a launcher run maps to one (README.md, "Exit codes").
#pragma once

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
// Retrying cannot help: --max-no-progress-restarts rounds in a row failed
// before any progress. A wrapper that requeues failed jobs should not
// (NVIDIA's ft_launcher uses the same value).
inline constexpr int k_exit_no_requeue = 93;
inline constexpr int k_exit_cannot_execute = 127;  // the worker program could not be executed

}  // namespace ddplaunch
