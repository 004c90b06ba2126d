// spawn_workers() from two threads: every worker started and handed back in
// rank order, and the second thread gone once retired (then started again).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

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
