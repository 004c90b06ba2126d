#include "node/health.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "config/integer.hpp"
#include "node/nvml.hpp"
#include "node/process_usage.hpp"
#include "posix/fd.hpp"
#include "posix/signals.hpp"

namespace ddplaunch {

namespace {

std::string errno_text(int e) {
  return std::strerror(e);
}

// The nearest directory of `path` (itself, or a parent) that exists.
std::string existing_dir(std::string path) {
  std::error_code ec;
  while (!path.empty() && !std::filesystem::exists(path, ec)) {
    const auto parent = std::filesystem::path(path).parent_path().string();
    if (parent == path) {
      break;
    }
    path = parent;
  }
  return path.empty() ? "." : path;
}

// Whether a file can be made in `dir`: "" if so, else why not.
std::string try_write(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    std::string templ = dir + "/.ddplaunch-check-XXXXXX";
    fd = ::mkostemp(templ.data(), O_CLOEXEC);
    if (fd >= 0) {
      ::unlink(templ.c_str());
    }
  }
  if (fd < 0) {
    return errno_text(errno);
  }
  const char byte = 0;
  const bool wrote = ::write(fd, &byte, 1) == 1;
  const int e = errno;
  ::close(fd);
  return wrote ? "" : errno_text(e);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// Every pid in /proc.
std::vector<int> pids() {
  std::vector<int> out;
  if (DIR* d = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(d)) {
      if (const auto pid = parse_integer_in(e->d_name, 1, std::numeric_limits<int>::max())) {
        out.push_back(static_cast<int>(*pid));
      }
    }
    ::closedir(d);
  }
  return out;
}

int parent_of(int pid) {
  const auto text = posix::read_small_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  const auto fields = text ? parse_stat(*text) : std::nullopt;
  return fields ? fields->ppid : 0;
}

// Calls fn(pid, link target) for each open fd of each process of this user.
template <typename F>
void each_fd(F&& fn) {
  const uid_t me = ::getuid();
  for (int pid : pids()) {
    const std::string base = "/proc/" + std::to_string(pid);
    struct stat st {};
    if (::stat(base.c_str(), &st) != 0 || st.st_uid != me) {
      continue;
    }
    DIR* d = ::opendir((base + "/fd").c_str());
    if (d == nullptr) {
      continue;
    }
    while (const dirent* e = ::readdir(d)) {
      if (!all_digits(e->d_name)) {
        continue;
      }
      char target[256];
      const std::string link = base + "/fd/" + e->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n > 0) {
        fn(pid, std::string(target, static_cast<size_t>(n)));
      }
    }
    ::closedir(d);
  }
}

// The socket inodes listening on `port` (TCP, IPv4 and IPv6).
std::set<std::string> listening_inodes(int port) {
  std::set<std::string> inodes;
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      const auto colon = local.rfind(':');
      if (state == "0A" && colon != std::string::npos &&
          parse_hex(std::string_view(local).substr(colon + 1)) ==
              static_cast<unsigned long long>(port)) {
        inodes.insert(inode);
      }
    }
  }
  return inodes;
}

}  // namespace

CheckResult check_disk(const std::vector<std::string>& dirs) {
  CheckResult r{"disk", CheckResult::State::k_ok, ""};
  for (const auto& dir : dirs) {
    const std::string at = existing_dir(dir);
    if (std::string why = try_write(at); !why.empty()) {
      r.state = CheckResult::State::k_failed;
      r.detail = "cannot write in " + at + (at != dir ? " (for " + dir + ")" : "") + ": " + why;
      return r;
    }
    r.detail += (r.detail.empty() ? "" : ", ") + at + " writable";
  }
  return r;
}

CheckResult check_gpus(const EnvMap& env) {
  CheckResult r{"gpu", CheckResult::State::k_skipped, ""};
  std::string why;
  const auto nvml = NvmlSession::open(why);
  if (!nvml) {
    r.detail = why + ": GPUs not checked";
    return r;
  }
  const std::vector<std::string> wanted = nvml->visible(env);
  r.state = CheckResult::State::k_ok;
  for (const auto& id : wanted) {
    std::string error;
    if (!nvml->responds(id, error)) {
      r.state = CheckResult::State::k_failed;
      r.detail = "GPU " + id + " does not respond: " + error;
      break;
    }
  }
  if (r.state == CheckResult::State::k_ok) {
    r.detail = std::to_string(wanted.size()) + " GPU(s) respond";
  }
  return r;
}

CheckResult check_strays(const std::vector<int>& ports) {
  CheckResult r{"strays", CheckResult::State::k_ok, ""};
  std::set<int> mine;  // this process and its ancestors: they started the check
  for (int pid = ::getpid(); pid > 1 && mine.insert(pid).second;) {
    pid = parent_of(pid);
  }
  std::vector<std::set<std::string>> inodes;
  for (int port : ports) {
    inodes.push_back(listening_inodes(port));
  }
  std::vector<std::string> found;
  each_fd([&](int pid, const std::string& target) {
    const bool gpu = target.rfind("/dev/nvidia", 0) == 0 && all_digits(target.substr(11));
    if (gpu && mine.count(pid) == 0) {
      found.push_back("pid " + std::to_string(pid) + " (" + posix::process_name(pid) + ") holds " +
                      target);
    }
    for (size_t i = 0; i < ports.size(); ++i) {
      if (target.rfind("socket:[", 0) == 0 &&
          inodes[i].count(target.substr(8, target.size() - 9)) > 0) {
        found.push_back("pid " + std::to_string(pid) + " (" + posix::process_name(pid) +
                        ") listens on port " + std::to_string(ports[i]));
        inodes[i].clear();  // named once
      }
    }
  });
  for (size_t i = 0; i < ports.size(); ++i) {
    if (!inodes[i].empty()) {
      found.push_back("another user's process listens on port " + std::to_string(ports[i]));
    }
  }
  if (!found.empty()) {
    r.state = CheckResult::State::k_failed;
    r.detail = found.front();
    if (found.size() > 1) {
      r.detail += " (and " + std::to_string(found.size() - 1) + " more)";
    }
    return r;
  }
  r.detail = "no process of this user holds a GPU" +
             (ports.empty() ? std::string() : ", and the job's ports are free");
  return r;
}

}  // namespace ddplaunch
