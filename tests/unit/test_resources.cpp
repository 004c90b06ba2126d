#include <gtest/gtest.h>
#include <netdb.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "config/env_map.hpp"
#include "config/launch_error.hpp"
#include "node/binding.hpp"
#include "node/identity.hpp"
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
  NodeResources none;
  none.cpus = 8;
  NodeResources driver = none;
  driver.driver_gpus = 4;
  NodeResources visible = driver;
  visible.visible_gpus = 2;
  EXPECT_EQ(resolve_nproc(NprocMode::k_fixed, 3, driver), 3);
  EXPECT_EQ(resolve_nproc(NprocMode::k_cpu, 1, driver), 8);
  EXPECT_EQ(resolve_nproc(NprocMode::k_gpu, 1, driver), 4);
  EXPECT_EQ(resolve_nproc(NprocMode::k_gpu, 1, visible), 2) << "inherited list wins";
  EXPECT_EQ(resolve_nproc(NprocMode::k_auto, 1, visible), 2);
  EXPECT_EQ(resolve_nproc(NprocMode::k_auto, 1, none), 8);
  EXPECT_THROW(resolve_nproc(NprocMode::k_gpu, 1, none), UsageError);
  NodeResources hidden = driver;
  hidden.visible_gpus = 0;
  EXPECT_THROW(resolve_nproc(NprocMode::k_gpu, 1, hidden), UsageError)
      << "CUDA_VISIBLE_DEVICES='' hides the driver's GPUs";
  EXPECT_THROW(resolve_nproc(NprocMode::k_xpu, 1, driver), UsageError) << "no Intel GPU";
  NodeResources intel = none;
  intel.xpus = 2;
  EXPECT_EQ(resolve_nproc(NprocMode::k_xpu, 1, intel), 2);
}

TEST(Resources, CpuListsAsLinuxWritesThem) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  for (const char* bad : {"3-1", "a", "1,,2", "-1", "0-"}) {
    EXPECT_FALSE(parse_cpu_list(bad)) << bad;
  }
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
}

TEST(Resources, VisibleDeviceEntriesKeepTheirNames) {
  EXPECT_EQ(visible_devices("GPU-8f2a, GPU-11aa,-1,3"),
            (std::vector<std::string>{"GPU-8f2a", "GPU-11aa"}));
  EXPECT_EQ(visible_devices("4,5"), (std::vector<std::string>{"4", "5"}));
}

NodeResources two_numa_nodes() {
  NodeResources r;
  r.cpus = 8;
  r.allowed_cpus = {0, 1, 2, 3, 4, 5, 6, 7};
  r.numa_cpus = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  r.gpu_ids = {"0", "1", "2", "3"};
  r.gpu_source = "the NVIDIA driver";
  return r;
}

TEST(Binding, CoresSplitTheAllowedCpus) {
  Config c;
  c.cpu_bind = CpuBind::k_cores;
  std::vector<std::string> notes;
  auto b = plan_bindings(c, 3, two_numa_nodes(), notes);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(b[1].cpus, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(b[2].cpus, (std::vector<int>{5, 6, 7}));
  EXPECT_EQ(b[1].omp_threads, 3);
  EXPECT_FALSE(b[0].set_gpus);
  // More workers than CPUs: they share, and it is said.
  NodeResources one_cpu = two_numa_nodes();
  one_cpu.allowed_cpus = {5};
  one_cpu.numa_cpus = {{5}};
  b = plan_bindings(c, 2, one_cpu, notes);
  EXPECT_EQ(b[0].cpus, std::vector<int>{5});
  EXPECT_EQ(b[1].cpus, std::vector<int>{5});
  EXPECT_EQ(notes.size(), 1u);
}

TEST(Binding, NumaSpreadsRanksInBlocks) {
  Config c;
  c.cpu_bind = CpuBind::k_numa;
  std::vector<std::string> notes;
  auto b = plan_bindings(c, 4, two_numa_nodes(), notes);
  EXPECT_EQ(b[0].cpus, b[1].cpus);
  EXPECT_EQ(b[1].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(b[2].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(b[3].omp_threads, 2) << "four CPUs shared by two ranks";
  EXPECT_TRUE(notes.empty());
  NodeResources flat = two_numa_nodes();
  flat.numa_cpus = {flat.allowed_cpus};
  b = plan_bindings(c, 2, flat, notes);
  EXPECT_EQ(b[1].cpus.size(), 8u);
  EXPECT_EQ(notes.size(), 1u) << "one NUMA node: said once";
  c.cpu_bind = CpuBind::k_none;
  EXPECT_TRUE(plan_bindings(c, 2, flat, notes)[0].cpus.empty());
}

TEST(Binding, GpusPerProcSlicesTheNodesList) {
  Config c;
  c.gpus_per_proc = 2;
  std::vector<std::string> notes;
  NodeResources r = two_numa_nodes();
  r.gpu_ids = {"GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-e"};
  r.gpu_source = "CUDA_VISIBLE_DEVICES";
  auto b = plan_bindings(c, 2, r, notes);
  EXPECT_EQ(b[0].gpus, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(b[1].gpus, (std::vector<std::string>{"GPU-c", "GPU-d"}));
  EXPECT_EQ(describe_binding(b[1]), "CPUs inherited, GPUs GPU-c,GPU-d");
  try {
    plan_bindings(c, 3, r, notes);
    FAIL() << "three workers of two GPUs need six";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 6 GPUs; this node may use 5 (from "
                                         "CUDA_VISIBLE_DEVICES"),
              std::string::npos)
        << e.what();
  }
}

TEST(Binding, TensorFlowWorkersEachSeeTheirOwnGpus) {
  Config c;
  c.env_tf = true;
  std::vector<std::string> notes;
  auto b = plan_bindings(c, 2, two_numa_nodes(), notes);
  EXPECT_EQ(b[0].gpus, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(b[1].gpus, (std::vector<std::string>{"2", "3"}));
  NodeResources no_gpus = two_numa_nodes();
  no_gpus.gpu_ids.clear();
  EXPECT_FALSE(plan_bindings(c, 2, no_gpus, notes)[0].set_gpus);
}

TEST(Resources, CapturesEnviron) {
  const char* entries[] = {"A=1", "B=x=y", "EMPTY=", "=bad", "NOEQ", nullptr};
  EnvMap env = capture_environment(const_cast<char**>(entries));
  EXPECT_EQ(env.size(), 3u);
  EXPECT_EQ(env["B"], "x=y");
  EXPECT_EQ(env["EMPTY"], "");
}

// --master-addr: a name that can never resolve is refused at once; one that
// resolves only later (a Kubernetes headless service) is waited for.
TEST(MasterName, OnlyANameThatCanNeverBeValidIsRefusedAtOnce) {
  for (const char* ok : {"node0", "gpu-01.cluster.local", "master-0.svc.", "10.0.0.1", "fd00::1",
                         "pytorch-job-master-0", "a_b"}) {
    EXPECT_TRUE(plausible_host(ok)) << ok;
  }
  for (const char* bad :
       {"", "no-such-host.invalid", "a..b", "-node", "node-", "a b", "x/y", "node0:29500"}) {
    EXPECT_FALSE(plausible_host(bad)) << bad;
  }
  EXPECT_FALSE(plausible_host(std::string(64, 'a'))) << "a label of 64 bytes";
}

TEST(MasterName, ANameThatResolvesLaterIsWaitedForThenUsed) {
  Config c;
  c.nnodes = 2;
  c.master_addr = "master-0.training";
  c.rdzv_timeout_s = 600;
  int asked = 0;
  std::vector<std::chrono::steady_clock::time_point> sleeps;
  wait_for_master_name(
      c, [&](std::chrono::steady_clock::time_point t) { sleeps.push_back(t); },
      [&](const std::string& name) {
        EXPECT_EQ(name, "master-0.training");
        return ++asked < 3 ? EAI_NONAME : 0;
      });
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(sleeps.size(), 2u) << "backs off between tries";
  c.master_addr = "typo..name";
  EXPECT_THROW(wait_for_master_name(
                   c, [](auto) {}, [](const std::string&) { return 0; }),
               UsageError);
}

TEST(MasterName, ANameThatNeverResolvesEndsAtTheRendezvousTimeout) {
  Config c;
  c.nnodes = 2;
  c.master_addr = "master-0.training";
  c.rdzv_timeout_s = 0.3;
  try {
    wait_for_master_name(
        c, [](std::chrono::steady_clock::time_point t) { std::this_thread::sleep_until(t); },
        [](const std::string&) { return EAI_NONAME; });
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.exit_code(), k_exit_rendezvous);
    EXPECT_NE(std::string(e.what()).find("did not resolve within --rdzv-timeout"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace ddplaunch
