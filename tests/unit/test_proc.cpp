// proc/ with real processes: the Child owner, reaping and the stray sweep,
// the child starter, the job guard's marker sweep and private directory,
// and each path workers start by, forced through the spawn test hooks
// (clone3 refused as on an older kernel, clone3 out of processes, a kernel
// without CLOSE_RANGE_UNSHARE, the launcher moving into the job's cgroup).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "config/launch_error.hpp"
#include "posix/fd.hpp"
#include "proc/clone3.hpp"
#include "proc/guard.hpp"
#include "proc/reap.hpp"
#include "proc/spawn.hpp"
#include "proc/starter.hpp"

namespace ddplaunch {
namespace {

using namespace std::chrono_literals;

// Whether `pid` has ended (gone, or a zombie nobody reaped yet).
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) {
    return true;
  }
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

bool await_ended(pid_t pid) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!ended(pid) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  return ended(pid);
}

// The first line `fd` gives (blocking reads, for a child that prints one).
std::string first_line(int fd) {
  std::string line;
  char c;
  while (true) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 1 && c != '\n') {
      line += c;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      std::this_thread::sleep_for(1ms);
    } else {
      return line;
    }
  }
}

ExitInfo wait_for(Child& child) {
  int status = 0;
  while (::waitpid(child.pid(), &status, 0) < 0 && errno == EINTR) {
  }
  child.mark_reaped();
  return ExitInfo::from_wait_status(status);
}

Child start(std::vector<std::string> argv, bool stdin_pipe = false) {
  ChildStart spec;
  spec.argv = std::move(argv);
  spec.stdin_pipe = stdin_pipe;
  return ProcessStarter().start(spec);
}

TEST(Child, DroppedUnreapedItKillsItsWholeGroupAndReapsIt) {
  pid_t pid = -1;
  pid_t background = -1;
  {
    Child child = start({"/bin/sh", "-c", "sleep 100 & echo $!; wait"});
    pid = child.pid();
    background = std::stoi(first_line(child.out().get()));
  }
  // Reaped: no longer our child.
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  // Its group's other process went with it.
  EXPECT_TRUE(await_ended(background));
}

TEST(Child, AMovedChildIsOwnedOnceByItsNewOwner) {
  Child first = start({"/bin/sh", "-c", "read line; exit 7"}, true);
  const pid_t pid = first.pid();
  Child second(std::move(first));
  EXPECT_EQ(first.pid(), -1);  // NOLINT(bugprone-use-after-move): the moved-from owns nothing
  {
    Child gone(std::move(first));  // dropping an empty owner touches no process
  }
  EXPECT_FALSE(ended(pid));
  second.in().close();  // `read` sees its end
  EXPECT_EQ(wait_for(second).code(), 7);
}

TEST(Child, SignalReachesTheChildsGroup) {
  Child child = start({"/bin/sh", "-c", "sleep 100 & echo $!; wait"});
  const pid_t background = std::stoi(first_line(child.out().get()));
  child.signal(SIGTERM);
  const ExitInfo info = wait_for(child);
  EXPECT_TRUE(info.by_signal());
  EXPECT_TRUE(await_ended(background));
  child.signal(SIGTERM);  // reaped: nothing is signalled, no error
}

TEST(ChildStarter, ProgramsAreFoundOnPathAndAMissingOneIs127) {
  Child child = start({"true"});
  EXPECT_TRUE(wait_for(child).success());
  try {
    start({"ddplaunch-no-such-program"});
    FAIL() << "started";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.exit_code(), k_exit_cannot_execute);
    EXPECT_NE(std::string(e.what()).find("cannot execute 'ddplaunch-no-such-program'"),
              std::string::npos)
        << e.what();
  }
}

TEST(ChildStarter, TheChildHasAnEmptyMaskAndIgnoresNothingTheLauncherIgnoresForItself) {
  sigset_t blocked, old;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &blocked, &old);
  ::signal(SIGPIPE, SIG_IGN);
  Child child = start({"/bin/sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status"});
  const std::string blk = first_line(child.out().get());
  const std::string ign = first_line(child.out().get());
  wait_for(child);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  EXPECT_EQ(blk, "SigBlk:\t0000000000000000");
  // SIGPIPE (bit 13) is the launcher's to ignore, not the child's.
  const unsigned long long ignored = std::stoull(ign.substr(ign.find('\t') + 1), nullptr, 16);
  EXPECT_EQ(ignored & (1ULL << (SIGPIPE - 1)), 0ULL) << ign;
}

TEST(ChildStarter, OutputCanGoToAFileStderrWithIt) {
  const std::string path = testing::TempDir() + "ddplaunch-starter-out";
  { std::ofstream create(path); }
  ChildStart spec;
  spec.argv = {"/bin/sh", "-c", "echo out; echo err >&2"};
  spec.output_path = path;
  Child child = ProcessStarter().start(spec);
  EXPECT_FALSE(child.out().valid());
  EXPECT_TRUE(wait_for(child).success());
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "out\nerr\n");
  std::filesystem::remove(path);
}

TEST(Reap, EachEndedChildIsReapedOnceWithHowItEnded) {
  Child a = start({"/bin/sh", "-c", "exit 3"});
  Child b = start({"/bin/sh", "-c", "kill -9 $$"});
  std::map<pid_t, ExitInfo> got;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (got.size() < 2 && std::chrono::steady_clock::now() < until) {
    if (auto r = reap_any()) {
      got.emplace(r->first, r->second);
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  a.mark_reaped();
  b.mark_reaped();
  ASSERT_EQ(got.size(), 2U);
  EXPECT_EQ(got.at(a.pid()).code(), 3);
  EXPECT_TRUE(got.at(b.pid()).by_signal());
  EXPECT_EQ(got.at(b.pid()).signal(), SIGKILL);
  EXPECT_FALSE(reap_any());  // nothing more
}

TEST(Reap, ASubreaperFindsAndKillsOrphansThatLeftTheirWorkersGroup) {
  // In a child process of its own: the test process stays no subreaper.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    become_subreaper();
    // A worker that leaves a setsid'd process behind and exits.
    Child worker = start({"/bin/sh", "-c", "setsid sleep 100 & exit 0"});
    int status = 0;
    ::waitpid(worker.pid(), &status, 0);
    worker.mark_reaped();
    // The orphan is ours now; the sweep kills it (and spares `spare`).
    Child spare = start({"sleep", "100"});
    const auto until = std::chrono::steady_clock::now() + 10s;
    int killed = 0;
    while (killed == 0 && std::chrono::steady_clock::now() < until) {
      killed = kill_stray_children(spare.pid());
    }
    while (reap_any()) {
    }
    _exit(killed == 1 && !ended(spare.pid()) ? 0 : 10 + killed);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(Guard, TheMarkerSweepKillsMarkedProcessesOnly) {
  const std::string marker = "test-" + std::to_string(::getpid());
  WorkerSpec marked;
  // It says its setsid'd process's pid once that one is started.
  marked.argv = {"/bin/sh", "-c", "setsid sleep 100 & echo $!; exec sleep 100"};
  auto env = std::make_shared<const EnvMap>(EnvMap{{"PATH", "/usr/bin:/bin"}});
  marked.env = WorkerEnv(env, EnvMap{{"PATH", "/usr/bin:/bin"}, {"DDPLAUNCH_AGENT_ID", marker}});
  std::vector<Child> children = spawn_workers({marked});
  const pid_t escaped = std::stoi(first_line(children[0].out().get()));
  Child unmarked = start({"sleep", "100"});
  // Swept until both are gone (a process killed but not yet gone may be
  // found, and counted, again).
  const auto until = std::chrono::steady_clock::now() + 10s;
  int killed = 0;
  while ((!ended(escaped) || !ended(children[0].pid())) &&
         std::chrono::steady_clock::now() < until) {
    killed += kill_marked_processes(marker);
  }
  EXPECT_TRUE(await_ended(escaped));
  EXPECT_GE(killed, 2);
  EXPECT_TRUE(wait_for(children[0]).by_signal());
  EXPECT_FALSE(ended(unmarked.pid()));
}

TEST(Guard, ItsPrivateDirectoryGoesWithItAndItsProcessOutlivesIt) {
  std::string dir;
  pid_t guard = -1;
  {
    JobGuard job(false);
    dir = job.job_dir();
    guard = job.guard_pid();
    EXPECT_EQ(job.marker().rfind(std::to_string(::getpid()) + "-", 0), 0U) << job.marker();
    ASSERT_FALSE(dir.empty());
    struct stat st = {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700U);
    EXPECT_EQ(job.mechanism(), "a guard process");
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
  // Told "done", the guard waits for this process to be gone before it
  // sweeps: it is still there (then stopped here, as this process stays).
  ASSERT_GT(guard, 0);
  EXPECT_EQ(::waitpid(guard, nullptr, WNOHANG), 0);
  ::kill(guard, SIGKILL);
  ASSERT_EQ(::waitpid(guard, nullptr, 0), guard);
}

// --- the paths workers start by --------------------------------------------

std::vector<WorkerSpec> exiting_workers(int n) {
  std::vector<WorkerSpec> specs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    specs[static_cast<size_t>(i)].argv = {"/bin/sh", "-c", "exit " + std::to_string(i)};
  }
  return specs;
}

void expect_exits_in_order(std::vector<Child>& children) {
  for (size_t i = 0; i < children.size(); ++i) {
    EXPECT_EQ(wait_for(children[i]).code(), static_cast<int>(i)) << "worker " << i;
  }
}

struct SpawnPathTest : testing::Test {
  void SetUp() override {
    if (!clone3_vfork_available()) {
      GTEST_SKIP() << "this build starts workers with vfork only";
    }
    reserve_spawn_slots();  // children then share the fd table: clone3 is tried
  }
  void TearDown() override { set_spawn_faults_for_tests({}); }
};

TEST_F(SpawnPathTest, Clone3RefusedAsOnAnOlderKernelFallsBackToVforkForGood) {
  set_spawn_faults_for_tests({.clone3_errno = ENOSYS});
  auto children = spawn_workers(exiting_workers(3));
  expect_exits_in_order(children);
  SpawnPaths paths = spawn_paths_for_tests();
  EXPECT_EQ(paths.clone3, 0);
  EXPECT_EQ(paths.vfork, 3);
  EXPECT_FALSE(paths.clone3_on);
}

TEST_F(SpawnPathTest, Clone3OutOfProcessesIsThatWorkersErrorAndClone3Stays) {
  set_spawn_faults_for_tests({.clone3_errno = EAGAIN});
  try {
    spawn_workers(exiting_workers(2));
    FAIL() << "started";
  } catch (const SpawnError& e) {
    EXPECT_NE(std::string(e.what()).find("Resource temporarily unavailable"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("ulimit -u"), std::string::npos) << e.what();
  }
  SpawnPaths paths = spawn_paths_for_tests();
  EXPECT_TRUE(paths.clone3_on);
  EXPECT_EQ(paths.vfork, 0);
  set_spawn_faults_for_tests({});
  auto children = spawn_workers(exiting_workers(2));
  expect_exits_in_order(children);
  EXPECT_EQ(spawn_paths_for_tests().clone3, 2);
}

TEST_F(SpawnPathTest, AKernelWithoutCloseRangeUnshareStartsTheChildAgainWithACopiedTable) {
  set_spawn_faults_for_tests({.unshare_fails = true});
  auto children = spawn_workers(exiting_workers(3));
  expect_exits_in_order(children);
  SpawnPaths paths = spawn_paths_for_tests();
  EXPECT_EQ(paths.unshare_retries, 1);  // the first; the later ones copy from the start
  EXPECT_FALSE(paths.share_files);
}

// A cgroup v2 directory of the test's own under this process's cgroup, or
// "" where none can be made (no cgroup v2, no right to write it).
std::string make_test_cgroup() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) {
      path = line.substr(3);
    }
  }
  for (const char* mount : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    const std::string parent = std::string(mount) + (path == "/" ? "" : path);
    const std::string dir = parent + "/ddplaunch-unit-" + std::to_string(::getpid());
    if (std::filesystem::exists(parent + "/cgroup.procs") && ::mkdir(dir.c_str(), 0755) == 0) {
      return dir;
    }
  }
  return "";
}

std::string cgroup_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) {
      return line.substr(3);
    }
  }
  return "";
}

TEST_F(SpawnPathTest, WorkersAreClonedIntoTheCgroupOrTheLauncherMovesInWhenClone3IsRefused) {
  const std::string dir = make_test_cgroup();
  if (dir.empty()) {
    GTEST_SKIP() << "no cgroup v2 directory can be made here";
  }
  const std::string name = dir.substr(dir.rfind('/'));
  const std::string own = cgroup_of(::getpid());
  const std::string back = dir.substr(0, dir.rfind('/')) + "/cgroup.procs";
  posix::Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  for (const bool refused : {false, true}) {
    set_spawn_faults_for_tests({.clone3_errno = refused ? EPERM : 0});
    spawn_into_cgroup(fd.get(), dir + "/cgroup.procs");
    WorkerSpec spec;
    spec.argv = {"sleep", "100"};
    const EnvMap path{{"PATH", "/usr/bin:/bin"}};
    spec.env = WorkerEnv(std::make_shared<const EnvMap>(path), path);
    std::vector<Child> children = spawn_workers({spec});
    EXPECT_TRUE(cgroup_of(children[0].pid()).ends_with(name)) << cgroup_of(children[0].pid());
    const SpawnPaths paths = spawn_paths_for_tests();
    if (refused) {
      // The launcher itself moved in, once, and vforked the worker there.
      EXPECT_EQ(paths.cgroup_moves, 1);
      EXPECT_EQ(paths.vfork, 1);
      EXPECT_TRUE(cgroup_of(::getpid()).ends_with(name));
    } else {
      // Cloned straight in: the launcher never moved.
      EXPECT_EQ(paths.cgroup_moves, 0);
      EXPECT_EQ(paths.clone3, 1);
      EXPECT_EQ(cgroup_of(::getpid()), own);
    }
    children.clear();  // killed and reaped
    std::ofstream(back) << ::getpid();
  }
  set_spawn_faults_for_tests({});
  EXPECT_EQ(::rmdir(dir.c_str()), 0) << std::strerror(errno);
}

}  // namespace
}  // namespace ddplaunch
