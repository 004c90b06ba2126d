// The one stop-signal policy: which signals the launcher handles, which of
// them stop the job on every node, and which are forwarded to the workers
// while the job goes on (Slurm's --signal warning before a time limit). Every
// phase (rendezvous, the PMIx exchange, the run, the exit drain) asks these
// functions. Pure; no system call.
#pragma once

#include <csignal>
#include <vector>

namespace ddplaunch {

// SIGINT, SIGTERM, SIGHUP and SIGQUIT: the job stops on every node, 128+N.
inline bool is_stop_signal(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

// SIGUSR1 and SIGUSR2: forwarded to every worker; the job goes on. With no
// worker running (rendezvous, the PMIx exchange, the exit drain) they are
// noted and dropped.
inline bool is_forwarded_signal(int sig) {
  return sig == SIGUSR1 || sig == SIGUSR2;
}

// Every signal the launcher reads from its signalfd: the stop and forwarded
// ones, and SIGCHLD. SIGHUP is left out when it was ignored at start (nohup).
inline std::vector<int> handled_signals(bool nohup) {
  std::vector<int> out = {SIGCHLD, SIGINT, SIGTERM, SIGQUIT, SIGUSR1, SIGUSR2};
  if (!nohup) {
    out.push_back(SIGHUP);
  }
  return out;
}

}  // namespace ddplaunch
