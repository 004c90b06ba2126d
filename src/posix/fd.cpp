#include "posix/fd.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "posix/error.hpp"

namespace ddplaunch::posix {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    close();
    m_fd = std::exchange(other.m_fd, -1);
  }
  return *this;
}

void Fd::close() {
  if (m_fd >= 0) {
    ::close(m_fd);
    m_fd = -1;
  }
}

Pipe make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw_errno("pipe2");
  }
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

Pipe make_pty() {
  Fd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!master || ::unlockpt(master.get()) != 0) {
    throw_errno("posix_openpt");
  }
  Fd terminal(::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!terminal) {
    throw_errno("TIOCGPTPEER");
  }
  termios t{};
  if (::tcgetattr(terminal.get(), &t) == 0) {
    ::cfmakeraw(&t);
    (void)::tcsetattr(terminal.get(), TCSANOW, &t);
  }
  return Pipe{std::move(master), std::move(terminal)};
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    throw_errno("fcntl(O_NONBLOCK)");
  }
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::optional<std::string> read_small_file(const std::string& path, size_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd.get(), buf, std::min(sizeof(buf), max_bytes - out.size()));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return std::nullopt;
    }
    if (n == 0) {
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

namespace {

constexpr std::string_view k_job_dir_prefix = "ddplaunch-job-";

std::vector<std::string> job_dir_parents(bool only_usable) {
  const char* tmp = std::getenv("TMPDIR");
  std::vector<std::string> parents;
  if (tmp != nullptr && *tmp != '\0') {
    parents.emplace_back(tmp);
    if (only_usable) {
      return parents;
    }
  }
  struct statfs fs = {};
  if (::statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    parents.emplace_back("/dev/shm");
  }
  parents.emplace_back("/tmp");  // also where /dev/shm is full or read-only
  return parents;
}

}  // namespace

JobDir make_job_dir() {
  for (const auto& parent : job_dir_parents(true)) {
    // A sweep (remove_stale_job_dirs) may take a directory between its
    // mkdtemp and its lock: then it is gone once the lock is ours, and
    // another is made.
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::string tmpl = parent + "/" + std::string(k_job_dir_prefix) + "XXXXXX";
      if (mkdtemp(tmpl.data()) == nullptr) {
        break;
      }
      Fd lock(::open(tmpl.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      int rc;
      while ((rc = ::flock(lock.get(), LOCK_SH)) != 0 && errno == EINTR) {
      }
      struct stat st = {};
      if (!lock || rc != 0) {
        return {tmpl, Fd()};  // no lock (a file system without flock): kept, unguarded
      }
      if (::fstat(lock.get(), &st) == 0 && st.st_nlink > 0) {
        return {tmpl, std::move(lock)};
      }
    }
  }
  return {};
}

int remove_stale_job_dirs() {
  const uid_t uid = ::geteuid();
  int removed = 0;
  for (const auto& parent : job_dir_parents(false)) {
    DIR* dir = ::opendir(parent.c_str());
    if (dir == nullptr) {
      continue;
    }
    while (dirent* ent = ::readdir(dir)) {
      const std::string_view name = ent->d_name;
      if (!name.starts_with(k_job_dir_prefix)) {
        continue;
      }
      const std::string path = parent + "/" + std::string(name);
      Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
      struct stat st = {};
      if (!fd || ::fstat(fd.get(), &st) != 0 || st.st_uid != uid) {
        continue;  // another user's, or not a directory
      }
      if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        continue;  // its job is alive
      }
      std::error_code ec;
      std::filesystem::remove_all(path, ec);  // under the lock: no job can take it meanwhile
      removed += ec ? 0 : 1;
    }
    ::closedir(dir);
  }
  return removed;
}

std::optional<rlimit> raise_fd_limit() {
  rlimit before;
  if (getrlimit(RLIMIT_NOFILE, &before) != 0 || before.rlim_cur >= before.rlim_max) {
    return std::nullopt;
  }
  rlimit raised = before;
  raised.rlim_cur = before.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    return std::nullopt;
  }
  return before;
}

std::optional<std::string> self_exe() {
  std::string path(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) {
    return std::nullopt;
  }
  path.resize(static_cast<size_t>(n));
  return path;
}

}  // namespace ddplaunch::posix
