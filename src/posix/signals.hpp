// SignalFd: the launcher's signals as a readable fd (ninja's approach with
// signalfd). Construction blocks the given signals in the calling thread;
// destruction restores the previous mask. Exactly one should exist at a time.
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <vector>

#include "posix/fd.hpp"

namespace ddplaunch::posix {

class SignalFd {
 public:
  explicit SignalFd(const std::vector<int>& signals);
  // Restores the signal mask. Signals still pending are discarded first, and
  // SIGUSR1/SIGUSR2 (whose default action kills) are ignored from then on:
  // one that arrives as the launcher exits (a scheduler signalling every
  // node while the job's verdict already ended this one) cannot turn the
  // job's exit code into 138.
  ~SignalFd();
  SignalFd(const SignalFd&) = delete;
  SignalFd& operator=(const SignalFd&) = delete;

  int fd() const { return m_fd.get(); }
  // The next pending signal, or nullopt when none is pending.
  std::optional<int> read_one();
  // The same, with the pid of the process that sent it (0: the kernel).
  struct Received {
    int signo;
    pid_t sender;
  };
  std::optional<Received> read_info();

 private:
  Fd m_fd;
  sigset_t m_mask;
  sigset_t m_old_mask;
};

// A process's name (/proc/PID/comm); "" once it is gone.
std::string process_name(pid_t pid);

// Whether `sig` is ignored (SIG_IGN) now: at start, what the launcher inherited.
bool inherited_ignore(int sig);

// Which of SIGPIPE, SIGXFSZ, SIGINT and SIGQUIT are ignored here now, and so
// must be set back to their default action in a child (the launcher ignores
// SIGPIPE; it forwards SIGINT and SIGQUIT to stop the job). Asked once per
// batch of children, in the parent: a child then makes one call per signal
// that needs it, usually one (SIGPIPE), not four.
struct SignalReset {
  int signals[4] = {};
  int count = 0;
};
SignalReset signals_to_reset();

// For a child between fork and exec: an empty signal mask, and the signals
// of `reset` back to their default actions. Other dispositions are
// inherited, as exec would have them: SIGHUP under nohup.
void reset_signals_for_child(const SignalReset& reset);

}  // namespace ddplaunch::posix
