#include "proc/reap.hpp"

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "config/integer.hpp"
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

namespace {

// This process's living children, from /proc/self/task/<tid>/children (one
// small file per thread: a reparented orphan may be listed under any of
// them); nullopt where the kernel has no such file (CONFIG_PROC_CHILDREN).
std::optional<std::vector<pid_t>> children_from_task_files() {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) {
    return std::nullopt;
  }
  std::vector<pid_t> out;
  bool any = false;
  while (dirent* ent = readdir(tasks)) {
    if (ent->d_name[0] == '.') {
      continue;
    }
    auto text = posix::read_small_file(std::string("/proc/self/task/") + ent->d_name + "/children",
                                       1 << 20);
    if (!text) {
      continue;  // a thread that ended meanwhile, or no such file at all
    }
    any = true;
    // "PID PID ... ": each number followed by a space.
    for (std::string_view rest = *text; !rest.empty();) {
      const size_t space = rest.find(' ');
      if (const auto pid =
              parse_integer_in(rest.substr(0, space), 1, std::numeric_limits<pid_t>::max())) {
        out.push_back(static_cast<pid_t>(*pid));
      }
      if (space == std::string_view::npos) {
        break;
      }
      rest.remove_prefix(space + 1);
    }
  }
  closedir(tasks);
  if (!any) {
    return std::nullopt;
  }
  return out;
}

// The slow way: every process's parent, from /proc/<pid>/stat.
std::vector<pid_t> children_from_proc_scan() {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  DIR* dir = opendir("/proc");
  if (dir == nullptr) {
    return out;
  }
  while (dirent* ent = readdir(dir)) {
    const auto pid = parse_integer_in(ent->d_name, 1, std::numeric_limits<pid_t>::max());
    if (!pid) {
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
    if (leading_integer(std::string_view(content).substr(rparen + 4)) == self) {
      out.push_back(static_cast<pid_t>(*pid));
    }
  }
  closedir(dir);
  return out;
}

}  // namespace

int kill_stray_children(pid_t spare) {
  // No child at all: nothing to read.
  siginfo_t info = {};
  if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD) {
    return 0;
  }
  auto children = children_from_task_files();
  if (!children) {
    children = children_from_proc_scan();
  }
  int killed = 0;
  for (pid_t pid : *children) {
    if (pid != spare) {
      kill(pid, SIGKILL);
      ++killed;
    }
  }
  return killed;
}

}  // namespace ddplaunch
