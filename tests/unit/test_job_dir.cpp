// A job's directory and its lock: a later launch removes the directories no
// process holds locked (their launcher and guard both killed), and never one
// whose job lives, the guard's forked copy of the lock included.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "posix/fd.hpp"
#include "scratch_dir.hpp"

namespace ddplaunch {
namespace {

// TMPDIR for the test's duration: job directories are made under it.
class TmpdirIs {
 public:
  explicit TmpdirIs(const std::string& dir) {
    if (const char* old = std::getenv("TMPDIR")) {
      m_old = old;
    }
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~TmpdirIs() {
    if (m_old.empty()) {
      ::unsetenv("TMPDIR");
    } else {
      ::setenv("TMPDIR", m_old.c_str(), 1);
    }
  }

 private:
  std::string m_old;
};

TEST(JobDir, OnlyTheDirectoriesNobodyHoldsAreRemoved) {
  ScratchDir scratch;
  TmpdirIs tmpdir(scratch / "");
  posix::JobDir alive = posix::make_job_dir();
  posix::JobDir killed = posix::make_job_dir();
  posix::JobDir guarded = posix::make_job_dir();
  ASSERT_FALSE(alive.path.empty());
  ASSERT_TRUE(alive.lock && killed.lock && guarded.lock);
  std::ofstream(killed.path + "/vader_segment.host.1.0") << "4 MiB of a killed rank";
  // A forked guard holds the lock after the launcher's copy is gone.
  posix::Pipe ready = posix::make_pipe();
  const pid_t guard = ::fork();
  if (guard == 0) {
    // As the guard keeps only its own job's lock (close_range).
    ::close(killed.lock.get());
    ::close(alive.lock.get());
    (void)!::write(ready.write.get(), "r", 1);
    ::pause();
    ::_exit(0);
  }
  ready.write.close();
  char byte = 0;
  ASSERT_EQ(::read(ready.read.get(), &byte, 1), 1);
  guarded.lock.close();
  killed.lock.close();
  EXPECT_GE(posix::remove_stale_job_dirs(), 1);
  EXPECT_FALSE(std::filesystem::exists(killed.path));
  EXPECT_TRUE(std::filesystem::exists(alive.path));
  EXPECT_TRUE(std::filesystem::exists(guarded.path)) << "its guard still holds it";
  ::kill(guard, SIGKILL);
  ::waitpid(guard, nullptr, 0);
  posix::remove_stale_job_dirs();
  EXPECT_FALSE(std::filesystem::exists(guarded.path));
  EXPECT_TRUE(std::filesystem::exists(alive.path));
  std::filesystem::remove_all(alive.path);
}

}  // namespace
}  // namespace ddplaunch
