// Fd: a move-only owner of one file descriptor (ccache's util::Fd). Closes on
// destruction. Not thread-safe; one owner at a time.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ddplaunch::posix {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : m_fd(fd) {}
  Fd(Fd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { close(); }

  int get() const { return m_fd; }
  bool valid() const { return m_fd >= 0; }
  explicit operator bool() const { return valid(); }
  int release() { return std::exchange(m_fd, -1); }
  void close();

 private:
  int m_fd = -1;
};

// A pipe whose both ends are close-on-exec.
struct Pipe {
  Fd read;
  Fd write;
};
Pipe make_pipe();
// A pseudo-terminal as a pipe: `write` is its terminal end (for a child's
// stdout: C and Fortran stdio then write each line at once), `read` the
// launcher's end, which reads EIO (an end, like a pipe's EOF) once every
// terminal end is closed. Raw: a "\n" stays "\n", nothing is echoed. Both
// close-on-exec, neither a controlling terminal.
Pipe make_pty();

void set_nonblocking(int fd);

// Raises this process's soft limit on open files to its hard limit. Returns
// the limits it had, when it raised them (a child given them back sees what
// its parent was given); nullopt when it was already at the hard limit or
// could not be raised. The one place the limit is raised.
std::optional<rlimit> raise_fd_limit();

// Writes all of `data`, retrying on EINTR and short writes. Returns false on
// any other error (EPIPE, EBADF...), leaving errno set.
bool write_all(int fd, std::string_view data);

// Up to `max_bytes` of a file, with plain read(2): nothing throws, even for
// /proc files of a process that exits while they are read. nullopt when it
// cannot be opened or read.
std::optional<std::string> read_small_file(const std::string& path, size_t max_bytes = 1 << 20);

// $TMPDIR, else /tmp.
std::string temp_dir();

// This program's own path (/proc/self/exe); nullopt when it cannot be read.
std::optional<std::string> self_exe();

// A job's private (0700) directory, DIR/ddplaunch-job-XXXXXX, and the shared
// flock(2) on it that says its job is alive: held by `lock` (close-on-exec;
// a forked guard that keeps a copy holds it too) until every holder is gone,
// whatever ended them (SIGKILL included).
struct JobDir {
  std::string path;  // empty: none could be made
  Fd lock;
};
// Makes one. DIR is $TMPDIR where the user set it; else /dev/shm where that
// is a tmpfs (memory): the directory lives only as long as the job, and on a
// disk its creation and removal cost a launch up to half a millisecond (a
// discarding file system frees its block at once); else /tmp.
JobDir make_job_dir();
// Removes every job directory of this user, in each place make_job_dir()
// makes them, that no process holds locked: the jobs whose launcher and
// guard were both killed (a cgroup kill, `kill -9 -PGID`). Returns how many.
int remove_stale_job_dirs();

}  // namespace ddplaunch::posix
