#include <gtest/gtest.h>

#include "node/gpu_release.hpp"

namespace ddplaunch {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;

// A clock that moves only when the wait sleeps.
struct FakeTime {
  TimePoint now{};
  std::vector<TimePoint> sleeps;
  std::function<void(TimePoint)> sleep() {
    return [this](TimePoint until) {
      sleeps.push_back(until);
      now = until;
    };
  }
  std::function<TimePoint()> clock() {
    return [this] { return now; };
  }
};

TEST(GpuRelease, WaitsUntilNoneOfTheRoundsPidsHoldsAGpu) {
  FakeTime t;
  int asks = 0;
  const GpuHolders holders = [&asks]() -> std::optional<std::vector<pid_t>> {
    ++asks;
    if (asks <= 3) {
      return std::vector<pid_t>{42, 7};  // 42 (ours) is still being torn down
    }
    return std::vector<pid_t>{7};  // 7 is another job's: not waited for
  };
  EXPECT_EQ(wait_gpu_release(holders, {42, 43}, t.now + milliseconds(60'000), t.sleep(), t.clock()),
            std::nullopt);
  EXPECT_EQ(asks, 4);
  ASSERT_EQ(t.sleeps.size(), 3u);
  EXPECT_EQ(t.sleeps[0] - TimePoint{}, k_gpu_release_poll);
}

TEST(GpuRelease, SaysWhichPidStillHoldsAGpuAtTheDeadline) {
  FakeTime t;
  const GpuHolders held = []() -> std::optional<std::vector<pid_t>> {
    return std::vector<pid_t>{5, 43};
  };
  const auto deadline = t.now + milliseconds(120);
  EXPECT_EQ(wait_gpu_release(held, {42, 43}, deadline, t.sleep(), t.clock()), 43);
  EXPECT_EQ(t.now, deadline) << "it waited the whole timeout, and not past it";
  EXPECT_EQ(t.sleeps.size(), 3u);  // 50, 100, then 120 ms
}

TEST(GpuRelease, NothingKnownNothingHeldNoWait) {
  FakeTime t;
  const GpuHolders unknown = []() -> std::optional<std::vector<pid_t>> { return std::nullopt; };
  EXPECT_EQ(wait_gpu_release(unknown, {42}, t.now + milliseconds(1000), t.sleep(), t.clock()),
            std::nullopt);
  const GpuHolders none = []() -> std::optional<std::vector<pid_t>> {
    return std::vector<pid_t>{0};
  };
  EXPECT_EQ(wait_gpu_release(none, {0, 0}, t.now + milliseconds(1000), t.sleep(), t.clock()),
            std::nullopt)
      << "a worker that never started (pid 0) is not waited for";
  EXPECT_TRUE(t.sleeps.empty());
}

TEST(GpuRelease, WithoutNvmlThereIsNoHoldersFunction) {
  std::string why;
  const GpuHolders holders = nvml_gpu_holders({}, why);
  if (holders) {
    GTEST_SKIP() << "this machine has NVML";
  }
  EXPECT_NE(why.find("NVML"), std::string::npos) << why;
}

}  // namespace
}  // namespace ddplaunch
