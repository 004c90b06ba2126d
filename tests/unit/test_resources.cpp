#include <gtest/gtest.h>

#include "ddplaunch/error.hpp"
#include "env/env_map.hpp"
#include "node/resources.hpp"

namespace ddplaunch {
namespace {

TEST(Resources, CountsCudaVisibleDevicesLikeCuda) {
  const std::pair<const char*, int> cases[] = {
      {"", 0},         {"0", 1},    {"0,1,2,3", 4},    {"3,1", 2},
      {"0,1,-1,2", 2}, {"-1", 0},   {"NoDevFiles", 0}, {"GPU-8f2a,GPU-11aa", 2},
      {"MIG-1234", 1}, {"0, 1", 2}, {"0,,1", 1},       {"0,x", 1},
  };
  for (const auto& [value, count] : cases) {
    EXPECT_EQ(count_visible_devices(value), count) << "'" << value << "'";
  }
}

TEST(Resources, ResolvesNprocModes) {
  NodeResources none{std::nullopt, 0, 8};
  NodeResources driver{std::nullopt, 4, 8};
  NodeResources visible{2, 4, 8};
  EXPECT_EQ(resolve_nproc(NprocMode::k_fixed, 3, driver), 3);
  EXPECT_EQ(resolve_nproc(NprocMode::k_cpu, 1, driver), 8);
  EXPECT_EQ(resolve_nproc(NprocMode::k_gpu, 1, driver), 4);
  EXPECT_EQ(resolve_nproc(NprocMode::k_gpu, 1, visible), 2) << "inherited list wins";
  EXPECT_EQ(resolve_nproc(NprocMode::k_auto, 1, visible), 2);
  EXPECT_EQ(resolve_nproc(NprocMode::k_auto, 1, none), 8);
  EXPECT_THROW(resolve_nproc(NprocMode::k_gpu, 1, none), UsageError);
  EXPECT_THROW(resolve_nproc(NprocMode::k_gpu, 1, NodeResources{0, 4, 8}), UsageError)
      << "CUDA_VISIBLE_DEVICES='' hides the driver's GPUs";
}

TEST(Resources, CapturesEnviron) {
  const char* entries[] = {"A=1", "B=x=y", "EMPTY=", "=bad", "NOEQ", nullptr};
  EnvMap env = capture_environment(const_cast<char**>(entries));
  EXPECT_EQ(env.size(), 3u);
  EXPECT_EQ(env["B"], "x=y");
  EXPECT_EQ(env["EMPTY"], "");
}

}  // namespace
}  // namespace ddplaunch
