#include "posix/signals.hpp"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "posix/error.hpp"

namespace ddplaunch::posix {

bool inherited_ignore(int sig) {
  struct sigaction current = {};
  return sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

SignalFd::SignalFd(const std::vector<int>& signals) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : signals) {
    sigaddset(&mask, s);
  }
  m_mask = mask;
  if (sigprocmask(SIG_BLOCK, &mask, &m_old_mask) != 0) {
    throw_errno("sigprocmask");
  }
  int fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) {
    throw_errno("signalfd");
  }
  m_fd = Fd(fd);
}

SignalFd::~SignalFd() {
  for (int sig : {SIGUSR1, SIGUSR2}) {
    struct sigaction old = {};
    if (sigismember(&m_mask, sig) == 1 && sigaction(sig, nullptr, &old) == 0 &&
        old.sa_handler == SIG_DFL) {
      ::signal(sig, SIG_IGN);
    }
  }
  while (read_one()) {
  }
  sigprocmask(SIG_SETMASK, &m_old_mask, nullptr);
}

std::optional<int> SignalFd::read_one() {
  const auto got = read_info();
  return got ? std::optional<int>(got->signo) : std::nullopt;
}

std::optional<SignalFd::Received> SignalFd::read_info() {
  signalfd_siginfo info;
  while (true) {
    ssize_t n = ::read(m_fd.get(), &info, sizeof(info));
    if (n == static_cast<ssize_t>(sizeof(info))) {
      const bool user = info.ssi_code == SI_USER || info.ssi_code == SI_QUEUE;
      return Received{static_cast<int>(info.ssi_signo),
                      user ? static_cast<pid_t>(info.ssi_pid) : 0};
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    return std::nullopt;
  }
}

std::string process_name(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

SignalReset signals_to_reset() {
  SignalReset reset;
  for (int sig : {SIGPIPE, SIGXFSZ, SIGINT, SIGQUIT}) {
    if (inherited_ignore(sig)) {
      reset.signals[reset.count++] = sig;
    }
  }
  return reset;
}

void reset_signals_for_child(const SignalReset& reset) {
  // Async-signal-safe. Caught signals are reset by exec itself; ignored ones
  // stay ignored (SIGHUP under nohup), except those the launcher ignores for
  // itself: SIGPIPE, and SIGXFSZ for symmetry with Python's subprocess, which
  // torchrun uses; and SIGINT and SIGQUIT, which a shell ignores for every
  // background job of a script (`ddplaunch ... &`): the launcher stops the
  // job on them whatever it inherited, by forwarding them, so the workers must
  // not be deaf to them (the terminal's Ctrl-C reaches only the launcher's
  // process group anyway). Then the mask: empty, as if no SignalFd had
  // blocked anything.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int i = 0; i < reset.count; ++i) {
    sigaction(reset.signals[i], &dfl, nullptr);
  }
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
}

}  // namespace ddplaunch::posix
