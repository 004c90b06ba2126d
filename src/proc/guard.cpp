#include "proc/guard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/magic.h>
#include <poll.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>

#include "config/integer.hpp"
#include "log.hpp"
#include "posix/fd.hpp"
#include "proc/spawn.hpp"

namespace ddplaunch {

namespace {

// The cgroup v2 mount point and this process's cgroup in it; empty when
// there is no cgroup v2 here.
std::string own_cgroup_dir() {
  // Plain reads and string_views: ifstream and istringstream cost this,
  // on every launch, more than the kernel's writing of mountinfo.
  const auto cgroup = posix::read_small_file("/proc/self/cgroup");
  if (!cgroup) {
    return {};
  }
  std::string_view path;
  for (std::string_view rest = *cgroup; !rest.empty();) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.starts_with("0::")) {
      path = line.substr(3);
    }
  }
  if (path.empty()) {
    return {};
  }
  // Where cgroup v2 is nearly always mounted (alone, or beside v1 as
  // "unified"): a statfs and a stat instead of the kernel's writing of every
  // mount there is (a node with containers has hundreds). A mount whose
  // root is not the hierarchy's (a container's own cgroup mounted without a
  // cgroup namespace) has no `path` below it: mountinfo then decides.
  for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    struct statfs fs = {};
    if (::statfs(mount, &fs) != 0 || fs.f_type != CGROUP2_SUPER_MAGIC) {
      continue;
    }
    std::string dir = std::string(mount) + (path == "/" ? "" : std::string(path));
    struct stat st = {};
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return dir;
    }
  }
  const auto mounts = posix::read_small_file("/proc/self/mountinfo");
  if (!mounts) {
    return {};
  }
  for (std::string_view rest = *mounts; !rest.empty();) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    // id parent devs root mount-point ... - fstype source options
    const size_t dash = line.find(" - ");
    if (dash == std::string_view::npos || line.substr(dash + 3, 8) != "cgroup2 ") {
      continue;
    }
    std::string_view fields[5];
    std::string_view head = line.substr(0, dash);
    for (auto& field : fields) {
      const size_t start = head.find_first_not_of(' ');
      head = start == std::string_view::npos ? std::string_view() : head.substr(start);
      const size_t end = head.find(' ');
      field = head.substr(0, end);
      head = end == std::string_view::npos ? std::string_view() : head.substr(end);
    }
    if (fields[3] == "/") {
      return std::string(fields[4]) + (path == "/" ? "" : std::string(path));
    }
  }
  return {};
}

void write_file(const std::string& path, const char* text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!::write(fd, text, std::strlen(text));
    ::close(fd);
  }
}

// Kills everything in the cgroup, waits (bounded) until it is empty, removes it.
void kill_cgroup(const std::string& dir) {
  write_file(dir + "/cgroup.kill", "1");
  for (int i = 0; i < 200; ++i) {
    if (::rmdir(dir.c_str()) == 0 || errno != EBUSY) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Empty job cgroups of launchers that are gone (one whose guard was killed
// too, say): removed, so they do not pile up.
void remove_stale_cgroups(const std::string& parent) {
  DIR* dir = opendir(parent.c_str());
  if (dir == nullptr) {
    return;
  }
  while (dirent* ent = readdir(dir)) {
    const std::string name = ent->d_name;
    if (!name.starts_with("ddplaunch-")) {
      continue;
    }
    const std::string pid = name.substr(10);
    struct stat st = {};
    if (pid.find_first_not_of("0123456789") == std::string::npos &&
        ::stat(("/proc/" + pid).c_str(), &st) != 0) {
      ::rmdir((parent + "/" + name).c_str());  // fails, harmlessly, unless empty
    }
  }
  closedir(dir);
}

bool environ_has(const std::string& pid, const std::string& needle) {
  const std::string env = posix::read_small_file("/proc/" + pid + "/environ").value_or("");
  for (size_t at = 0; at < env.size();) {
    size_t end = env.find('\0', at);
    if (end == std::string::npos) {
      end = env.size();
    }
    if (std::string_view(env).substr(at, end - at) == needle) {
      return true;
    }
    at = end + 1;
  }
  return false;
}

// How long a launcher that said "done" may take to leave before the guard
// goes on without waiting: its exit takes a fraction of a millisecond.
constexpr int k_launcher_exit_wait_ms = 2'000;

// The guard process. Until the launcher is gone it only waits: work done
// while the launcher starts the job or leaves it would take a CPU from the
// launcher (the guard, its child, runs where it runs).
[[noreturn]] void run_guard(int read_fd, pid_t launcher, const std::string& marker,
                            const std::string& cgroup, const std::string& job_dir) {
  // Out of the terminal's way: Ctrl-C and job control are for the launcher.
  setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU}) {
    ::signal(sig, SIG_IGN);
  }
  // The launcher's end, as its parent sees it (Linux 5.3+; before, the
  // pipe's end is taken for it). Opened now, while it is certainly the
  // launcher behind that pid.
  posix::Fd launcher_fd(static_cast<int>(::syscall(SYS_pidfd_open, launcher, 0)));
  if (launcher_fd && getppid() != launcher) {
    launcher_fd.close();  // it is gone already: the pid may be another's
  }
  std::string said;
  char buf[64];
  for (ssize_t n; (n = ::read(read_fd, buf, sizeof(buf))) != 0;) {
    if (n > 0) {
      said.append(buf, static_cast<size_t>(n));
    } else if (errno != EINTR) {
      break;
    }
  }
  // EOF: the launcher is exiting (its fds are closed as it goes), so the
  // cgroup holds only what it left behind. After a normal end that is
  // nothing to hurry for: the launcher's exit (and its parent's wait for it)
  // finishes first, instead of waiting for a CPU the guard took.
  const bool ended = said.find("done") != std::string::npos;
  if (ended && launcher_fd) {
    pollfd gone{launcher_fd.get(), POLLIN, 0};
    while (::poll(&gone, 1, k_launcher_exit_wait_ms) < 0 && errno == EINTR) {
    }
  }
  if (!cgroup.empty()) {
    kill_cgroup(cgroup);
  }
  if (!ended) {
    // The launcher died without ending the job: end what escaped the cgroup too.
    kill_marked_processes(marker);
  }
  if (!job_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(job_dir, ec);  // gone already after a normal end
  }
  if (!cgroup.empty()) {
    // Empty job cgroups of launchers that are gone too: last, not while
    // this launcher starts its workers.
    remove_stale_cgroups(std::filesystem::path(cgroup).parent_path().string());
  }
  // And the job directories of jobs whose launcher and guard were both
  // killed at once (a cgroup kill, `kill -9 -PGID`): nobody holds their lock.
  ::close(4);
  posix::remove_stale_job_dirs();
  _exit(0);
}

}  // namespace

std::vector<pid_t> kill_marked_once(const std::string& marker) {
  const std::string needle = "DDPLAUNCH_AGENT_ID=" + marker;
  const std::string self = std::to_string(getpid());
  std::vector<pid_t> found;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) {
    return found;
  }
  while (dirent* ent = readdir(dir)) {
    const std::string pid = ent->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid == self) {
      continue;
    }
    const auto number = parse_integer_in(pid, 1, std::numeric_limits<pid_t>::max());
    if (number && environ_has(pid, needle)) {
      kill(static_cast<pid_t>(*number), SIGKILL);
      found.push_back(static_cast<pid_t>(*number));
    }
  }
  closedir(dir);
  return found;
}

int kill_marked_processes(const std::string& marker) {
  int killed = 0;
  for (int round = 0; round < 64; ++round) {
    const auto found = kill_marked_once(marker).size();
    killed += static_cast<int>(found);
    if (found == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the killed ones go
  }
  return killed;
}

JobGuard::JobGuard(bool use_cgroup) {
  uint64_t random = 0;
  if (::getrandom(&random, sizeof(random), GRND_NONBLOCK) != sizeof(random)) {
    random = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  m_marker = fmt::format("{}-{:x}", getpid(), random);

  if (std::string parent = use_cgroup ? own_cgroup_dir() : std::string(); !parent.empty()) {
    std::string dir = parent + "/ddplaunch-" + std::to_string(getpid());
    struct stat st = {};
    if ((::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) &&
        ::stat((dir + "/cgroup.kill").c_str(), &st) == 0 &&
        (m_cgroup_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
      m_cgroup = dir;
    } else {
      ::rmdir(dir.c_str());
    }
  }

  posix::JobDir job_dir = posix::make_job_dir();
  m_job_dir = std::move(job_dir.path);
  m_job_dir_lock = job_dir.lock.release();

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    log::debug("no guard process (pipe: {}); the job ends with the launcher only",
               std::strerror(errno));
    return;
  }
  const pid_t launcher = getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child of a fork() runs first, on the launcher's CPU, and its
    // start (every page it touches faulted in anew) held the launcher up
    // 0.1 ms: it waits its turn instead (the launcher soon sleeps, on the
    // first worker's exec).
    sched_yield();
    ::close(fds[1]);
    if (fds[0] != 3) {
      ::dup2(fds[0], 3);
    }
    // Not the launcher's stdio: whoever reads its output (a pipe, `| tee`)
    // sees the end when the launcher ends, not when the guard does.
    const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3 && devnull >= 0; ++fd) {
      ::dup2(devnull, fd);
    }
    // The job directory's lock, shared: a later launch's sweep leaves the
    // directory alone while the guard lives, though the launcher is gone.
    if (m_job_dir_lock >= 0 && ::dup2(m_job_dir_lock, 4) == 4) {
      syscall(SYS_close_range, 5U, ~0U, 0U);
    } else {
      syscall(SYS_close_range, 4U, ~0U, 0U);
    }
    run_guard(3, launcher, m_marker, m_cgroup, m_job_dir);
  }
  ::close(fds[0]);
  if (pid < 0) {
    ::close(fds[1]);
    return;
  }
  m_guard_pid = pid;
  m_pipe_fd = fds[1];
  if (!m_cgroup.empty()) {
    // Every worker, and everything they start, is born in the job's cgroup.
    // The guard, forked before, stays outside to kill and remove it afterwards.
    spawn_into_cgroup(m_cgroup_fd, m_cgroup + "/cgroup.procs");
  }
  log::debug("workers are guarded by {}", mechanism());
}

// What escaped the workers' process groups and is still in the job's cgroup
// (a rank's `setsid` grandchild): killed, and waited for, so that nothing of
// the job runs once the launcher returns (the guard would take up to its
// wait for the launcher's exit longer). One read of cgroup.procs when
// nothing is left, the usual case. The launcher itself may be in the cgroup
// (where workers cannot be cloned into it): it is spared.
void JobGuard::end_escaped() const {
  if (m_cgroup.empty()) {
    return;
  }
  const std::string procs_path = m_cgroup + "/cgroup.procs";
  const pid_t self = getpid();
  for (int round = 0; round < 400; ++round) {
    const std::string procs = posix::read_small_file(procs_path).value_or("");
    bool any = false;
    for (size_t at = 0; at < procs.size();) {
      size_t end = procs.find('\n', at);
      end = end == std::string::npos ? procs.size() : end;
      const auto pid =
          parse_integer_in(procs.substr(at, end - at), 1, std::numeric_limits<pid_t>::max());
      if (pid && *pid != self) {
        ::kill(static_cast<pid_t>(*pid), SIGKILL);
        any = true;
      }
      at = end + 1;
    }
    if (!any) {
      return;
    }
    // The killed ones that are this launcher's (a subreaper's) are reaped
    // here; the guard, outside the cgroup, is not among them.
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

JobGuard::~JobGuard() {
  end_escaped();
  // Empty unless a worker wrote its error file: one rmdir, most of the time.
  if (!m_job_dir.empty() && ::rmdir(m_job_dir.c_str()) != 0) {
    std::error_code ec;
    std::filesystem::remove_all(m_job_dir, ec);
  }
  if (m_job_dir_lock >= 0) {
    ::close(m_job_dir_lock);
  }
  // "done", and the pipe stays open until this process is gone: then the
  // guard kills whatever is left in the cgroup and removes it.
  if (m_pipe_fd >= 0) {
    (void)!::write(m_pipe_fd, "done", 4);
  }
}

std::string JobGuard::mechanism() const {
  std::string guard = m_guard_pid > 0 ? "a guard process" : "the launcher alone";
  return m_cgroup.empty() ? guard : "cgroup v2 (" + m_cgroup + ") and " + guard;
}

}  // namespace ddplaunch
