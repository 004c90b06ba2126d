// spawn_workers() from two threads: every worker started and handed back in
// rank order, and the second thread gone once retired (then started again).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "proc/elf.hpp"
#include "proc/spawn.hpp"

namespace ddplaunch {
namespace {

int threads_of_this_process() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(dir)) {
      count += entry->d_name[0] != '.';
    }
    closedir(dir);
  }
  return count;
}

bool await_threads(int count) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (threads_of_this_process() != count && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return threads_of_this_process() == count;
}

TEST(Spawn, ARoundOfEightStartsFromTwoThreadsAndTheSecondGoesWhenRetired) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "a sanitizer build starts workers its own way";
#endif
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) < 2) {
    GTEST_SKIP() << "one CPU: workers start from one thread";
  }
  reserve_spawn_slots();
  std::vector<WorkerSpec> specs(8);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].rank = specs[i].local_rank = static_cast<int>(i);
    // Each exits with its rank: the order handed back is the order asked for.
    specs[i].argv = {"/bin/sh", "-c", "exit " + std::to_string(i)};
  }
  const int before = threads_of_this_process();
  for (int round = 0; round < 2; ++round) {
    std::vector<Child> children = spawn_workers(specs);
    ASSERT_EQ(children.size(), specs.size());
    // The second thread stays while workers it started may live.
    EXPECT_EQ(threads_of_this_process(), before + 1) << "round " << round;
    for (size_t i = 0; i < children.size(); ++i) {
      int status = 0;
      ASSERT_EQ(waitpid(children[i].pid(), &status, 0), children[i].pid());
      children[i].mark_reaped();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == static_cast<int>(i))
          << "worker " << i << " status " << status;
    }
    retire_spawn_thread();
    EXPECT_TRUE(await_threads(before)) << "round " << round << ": " << threads_of_this_process();
  }
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

// Everything a child wrote to `fd` until its end (EOF on a pipe, EIO on a
// terminal).
std::string read_to_end(int fd) {
  std::string out;
  char buf[256];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      return out;
    }
  }
}

TEST(Spawn, AWorkerGivenATerminalForStdoutWritesRawLinesThatEndWithIt) {
  std::vector<WorkerSpec> specs(2);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].rank = specs[i].local_rank = static_cast<int>(i);
    specs[i].stdout_tty = i == 0;
    specs[i].argv = {"/bin/sh", "-c", "test -t 1 && echo terminal || echo pipe; printf 'a\\nb\\n'"};
  }
  std::vector<Child> children = spawn_workers(specs);
  ASSERT_EQ(children.size(), 2u);
  // A terminal's "\n" stays one (raw), and its end reads as an end.
  EXPECT_EQ(read_to_end(children[0].out().get()), "terminal\na\nb\n");
  EXPECT_EQ(read_to_end(children[1].out().get()), "pipe\na\nb\n");
  for (auto& c : children) {
    int status = 0;
    ASSERT_EQ(waitpid(c.pid(), &status, 0), c.pid());
    c.mark_reaped();
  }
}

TEST(Elf, TheLibrariesAProgramNamesAreReadFromItsDynamicSection) {
  const auto needed = elf_needed("/bin/true");
  EXPECT_NE(std::find(needed.begin(), needed.end(), "libc.so.6"), needed.end());
  EXPECT_TRUE(elf_needs("/bin/true", "libc.so"));
  EXPECT_FALSE(elf_needs("/bin/true", "libmpi"));
  EXPECT_TRUE(elf_needed("/etc/hostname").empty()) << "not an ELF file";
  EXPECT_TRUE(elf_needed("/nonexistent").empty());
  // Cut short anywhere, an ELF file names nothing and nothing breaks.
  char path[] = "/tmp/ddplaunch-elf-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string bytes;
  {
    const int in = ::open("/bin/true", O_RDONLY);
    bytes = read_to_end(in);
    ::close(in);
  }
  for (size_t size : {size_t{4}, size_t{64}, size_t{200}, size_t{4096}}) {
    ASSERT_EQ(::ftruncate(fd, 0), 0);
    ASSERT_EQ(::pwrite(fd, bytes.data(), std::min(size, bytes.size()), 0),
              static_cast<ssize_t>(std::min(size, bytes.size())));
    EXPECT_LE(elf_needed(path).size(), needed.size()) << size;
  }
  ::close(fd);
  ::unlink(path);
}

}  // namespace
}  // namespace ddplaunch
