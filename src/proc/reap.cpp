#include "proc/reap.hpp"

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>

#include "posix/fd.hpp"

namespace ddplaunch {

std::optional<std::pair<pid_t, ExitInfo>> reap_any() {
  while (true) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      return std::make_pair(pid, ExitInfo::from_wait_status(status));
    }
    if (pid < 0 && errno == EINTR) {
      continue;
    }
    return std::nullopt;
  }
}

void become_subreaper() {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

int kill_stray_children(pid_t spare) {
  // No child at all (the usual case): skip the /proc scan.
  siginfo_t info = {};
  if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD) {
    return 0;
  }
  const pid_t self = getpid();
  int killed = 0;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) {
    return 0;
  }
  while (dirent* ent = readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(ent->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') {
      continue;
    }
    // Plain read(2): the process may exit while its stat is read.
    const std::string content =
        posix::read_small_file("/proc/" + std::string(ent->d_name) + "/stat", 4096).value_or("");
    auto rparen = content.rfind(')');
    if (rparen == std::string::npos || rparen + 4 > content.size()) {
      continue;
    }
    // After "pid (comm) " come: state, ppid.
    long ppid = std::strtol(content.c_str() + rparen + 4, nullptr, 10);
    if (ppid == self && pid != spare) {
      kill(static_cast<pid_t>(pid), SIGKILL);
      ++killed;
    }
  }
  closedir(dir);
  return killed;
}

}  // namespace ddplaunch
