#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "env/launch_spec.hpp"
#include "env/scheduler_env.hpp"
#include "env/tf_env.hpp"
#include "env/torch_env.hpp"

namespace ddplaunch {
namespace {

JobLayout two_nodes() {
  JobLayout l;
  l.node_rank = 1;
  l.nnodes = 2;
  l.local_world_size = 3;
  l.world_size = 7;  // node 0 has 4 workers
  l.rank_offset = 4;
  l.master_addr = "10.0.0.1";
  l.master_port = 41234;
  l.run_id = "job9";
  l.max_restarts = 2;
  return l;
}

TEST(EnvBuilders, TorchVariablesForOneRank) {
  EnvMap base = {{"PATH", "/bin"}, {"HOME", "/root"}};
  EnvMap env = build_torch_env(base, two_nodes(), 2);
  const std::pair<const char*, const char*> expected[] = {
      {"RANK", "6"},
      {"LOCAL_RANK", "2"},
      {"WORLD_SIZE", "7"},
      {"LOCAL_WORLD_SIZE", "3"},
      {"NODE_RANK", "1"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_RANK", "6"},
      {"ROLE_WORLD_SIZE", "7"},
      {"ROLE_NAME", "default"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "41234"},
      {"TORCHELASTIC_RUN_ID", "job9"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "2"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"OMP_NUM_THREADS", "1"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"PATH", "/bin"},
      {"HOME", "/root"},
  };
  for (const auto& [k, v] : expected) {
    EXPECT_EQ(env[k], v) << k;
  }
}

TEST(EnvBuilders, UserSettingsWinWhereTheyShould) {
  EnvMap base = {{"OMP_NUM_THREADS", "8"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}, {"RANK", "99"}};
  EnvMap env = build_torch_env(base, two_nodes(), 0);
  EXPECT_EQ(env["OMP_NUM_THREADS"], "8");
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "0");
  EXPECT_EQ(env["RANK"], "4") << "a stale inherited RANK is replaced";
}

TEST(EnvBuilders, GlooAndNcclUseTheAdvertisedInterfaceUnlessSet) {
  JobLayout l = two_nodes();
  EXPECT_FALSE(build_torch_env({}, l, 0).contains("GLOO_SOCKET_IFNAME")) << "one node: unset";
  l.socket_ifname = "eth1";
  EnvMap env = build_torch_env({}, l, 0);
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "eth1");
  env = build_torch_env({{"NCCL_SOCKET_IFNAME", "ib0"}}, l, 0);
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "ib0");
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth1");
}

TEST(LaunchSpec, BindingsGiveCpusGpusAndThreads) {
  Config c;
  c.program = "train";
  std::vector<Binding> b(3);
  b[0] = Binding{{0, 1}, {"GPU-a"}, 2, true};
  b[1] = Binding{{2, 3}, {"GPU-b"}, 2, true};
  b[2] = Binding{{4, 5}, {}, 2, false};
  LaunchSpec plan = make_launch_spec(c, two_nodes(), {{"CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b"}}, b);
  EXPECT_EQ(plan.workers[1].cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(plan.workers[1].env.at("CUDA_VISIBLE_DEVICES"), "GPU-b");
  EXPECT_EQ(plan.workers[2].env.at("CUDA_VISIBLE_DEVICES"), "GPU-a,GPU-b")
      << "not bound: inherited";
  EXPECT_EQ(plan.workers[0].env.at("OMP_NUM_THREADS"), "2") << "the share, not 1";
  plan = make_launch_spec(c, two_nodes(), {{"OMP_NUM_THREADS", "7"}}, b);
  EXPECT_EQ(plan.workers[0].env.at("OMP_NUM_THREADS"), "7") << "the user's own wins";
}

TEST(EnvBuilders, OmpOnlyForSeveralWorkers) {
  JobLayout one = two_nodes();
  one.local_world_size = 1;
  EXPECT_FALSE(build_torch_env({}, one, 0).contains("OMP_NUM_THREADS"));
  EXPECT_FALSE(sets_omp_num_threads({}, one));
  EXPECT_TRUE(sets_omp_num_threads({}, two_nodes()));
}

TEST(LaunchSpec, ArgvForScriptsModulesAndPrograms) {
  struct Case {
    Config config;
    EnvMap env;
    std::vector<std::string> argv;
  };
  auto cfg = [](std::string program, bool module, bool no_python, std::string python) {
    Config c;
    c.program = std::move(program);
    c.program_args = {"--x", "1"};
    c.module = module;
    c.no_python = no_python;
    c.python = std::move(python);
    return c;
  };
  const Case cases[] = {
      {cfg("train.py", false, false, ""), {}, {"python3", "-u", "train.py", "--x", "1"}},
      {cfg("train.py", false, false, "/usr/bin/python3"),
       {{"PYTHON_EXEC", "/opt/py"}},
       {"/usr/bin/python3", "-u", "train.py", "--x", "1"}},
      {cfg("train.py", false, false, ""),
       {{"PYTHON_EXEC", "/opt/py"}},
       {"/opt/py", "-u", "train.py", "--x", "1"}},
      {cfg("pkg.main", true, false, ""), {}, {"python3", "-u", "-m", "pkg.main", "--x", "1"}},
      {cfg("train.py", false, true, ""), {}, {"train.py", "--x", "1"}},
      {cfg("./a.out", false, false, ""), {}, {"./a.out", "--x", "1"}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(worker_argv(c.config, c.env), c.argv) << c.config.program;
  }
}

TEST(LaunchSpec, OneSpecPerLocalRankAndStdinOnlyForRankZero) {
  Config c;
  c.program = "p";
  LaunchSpec plan = make_launch_spec(c, two_nodes(), {});
  ASSERT_EQ(plan.workers.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.workers[i].local_rank, i);
    EXPECT_EQ(plan.workers[i].rank, 4 + i);
    EXPECT_EQ(plan.workers[i].inherit_stdin, i == 0);
  }
  EXPECT_EQ(plan.notices.size(), 1u) << "OMP_NUM_THREADS is mentioned once";
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

JobLayout second_node_of_three() {
  JobLayout l;
  l.node_rank = 1;
  l.nnodes = 3;
  l.local_world_size = 2;
  l.world_size = 5;
  l.rank_offset = 2;
  l.node_sizes = {{2, 2}, {1, 1}};
  return l;
}

TEST(SchedulerEnv, SlurmIdentityAgreesWithTheRanks) {
  // What srun gave the launcher: task 1 of 3, one per node.
  EnvMap base = {{"SLURM_JOB_ID", "42"},         {"SLURM_PROCID", "1"},
                 {"SLURM_LOCALID", "0"},         {"SLURM_NODEID", "1"},
                 {"SLURM_NTASKS", "3"},          {"SLURM_TASKS_PER_NODE", "1(x3)"},
                 {"SLURM_NTASKS_PER_NODE", "1"}, {"SLURM_JOB_NODELIST", "n[1-3]"}};
  LaunchSpec plan = make_launch_spec(
      [] {
        Config c;
        c.program = "train";
        return c;
      }(),
      second_node_of_three(), base);
  ASSERT_EQ(plan.workers.size(), 2u);
  for (const auto& w : plan.workers) {
    EXPECT_EQ(w.env.at("SLURM_PROCID"), w.env.at("RANK"));
    EXPECT_EQ(w.env.at("SLURM_LOCALID"), w.env.at("LOCAL_RANK"));
    EXPECT_EQ(w.env.at("SLURM_NODEID"), w.env.at("NODE_RANK"));
    EXPECT_EQ(w.env.at("SLURM_NTASKS"), "5");
    EXPECT_EQ(w.env.at("SLURM_NTASKS_PER_NODE"), "2");
    EXPECT_EQ(w.env.at("SLURM_TASKS_PER_NODE"), "2(x2),1");
    EXPECT_EQ(w.env.at("SLURM_JOB_NODELIST"), "n[1-3]") << "the rest is inherited";
  }
}

TEST(SchedulerEnv, NoSlurmNoSlurmVariables) {
  EnvMap env = {{"PATH", "/bin"}};
  rewrite_scheduler_identity(env, second_node_of_three(), 0);
  EXPECT_EQ(env, (EnvMap{{"PATH", "/bin"}}));
}

TEST(SchedulerEnv, TheOuterMpirunsIdentityIsRemoved) {
  EnvMap env = {{"OMPI_COMM_WORLD_RANK", "1"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                {"PMIX_RANK", "1"},
                {"PMIX_NAMESPACE", "ns"},
                {"PMIX_SERVER_URI41", "x"},
                {"OMPI_MCA_ess_base_jobid", "1"},
                {"OMPI_UNIVERSE_SIZE", "2"},
                {"OMPI_MCA_orte_ess_num_procs", "2"},
                {"OMPI_MCA_btl_tcp_if_include", "eth0"},
                {"OMPI_MCA_mpi_yield_when_idle", "1"}};
  rewrite_scheduler_identity(env, second_node_of_three(), 0);
  EXPECT_EQ(
      env, (EnvMap{{"OMPI_MCA_btl_tcp_if_include", "eth0"}, {"OMPI_MCA_mpi_yield_when_idle", "1"}}))
      << "the user's own MCA settings stay";
}

TEST(SchedulerEnv, TheUsersOwnOrteSettingsStayWhatMpirunSetGoes) {
  // As an outer Open MPI 4 mpirun leaves them, with two of the user's own.
  EnvMap env = {{"OMPI_MCA_orte_hnp_uri", "2056847360.0;tcp://10.0.0.1:5"},
                {"OMPI_MCA_orte_local_daemon_uri", "2056847360.0;tcp://10.0.0.1:5"},
                {"OMPI_MCA_orte_precondition_transports", "618d-02ec"},
                {"OMPI_MCA_orte_tmpdir_base", "/tmp"},
                {"OMPI_MCA_orte_top_session_dir", "/tmp/ompi.vm.0"},
                {"OMPI_MCA_orte_jobfam_session_dir", "/tmp/ompi.vm.0/pid.5"},
                {"OMPI_MCA_orte_ess_node_rank", "0"},
                {"OMPI_MCA_orte_launch", "1"},
                {"OMPI_MCA_ess", "^singleton"},
                {"OMPI_MCA_pmix", "^s1,s2,cray,isolated"},
                {"OMPI_MCA_mpi_oversubscribe", "0"},
                {"OMPI_MCA_shmem_RUNTIME_QUERY_hint", "mmap"},
                {"OMPI_MCA_orte_base_help_aggregate", "0"},
                {"OMPI_MCA_pml", "ob1"}};
  strip_outer_mpi_identity(env);
  EXPECT_EQ(env, (EnvMap{{"OMPI_MCA_orte_base_help_aggregate", "0"}, {"OMPI_MCA_pml", "ob1"}}));
  // Without an outer mpirun, orte_tmpdir_base is the user's; under one, a
  // value other than its default is the user's too.
  EnvMap users = {{"OMPI_MCA_orte_tmpdir_base", "/tmp"}};
  strip_outer_mpi_identity(users);
  EXPECT_EQ(users.at("OMPI_MCA_orte_tmpdir_base"), "/tmp");
  EnvMap chosen = {{"OMPI_MCA_orte_hnp_uri", "x"}, {"OMPI_MCA_orte_tmpdir_base", "/scratch"}};
  strip_outer_mpi_identity(chosen);
  EXPECT_EQ(chosen, (EnvMap{{"OMPI_MCA_orte_tmpdir_base", "/scratch"}}));
}

TEST(SchedulerEnv, SlurmCounts) {
  EXPECT_EQ(slurm_counts({{4, 1}}), "4");
  EXPECT_EQ(slurm_counts({{2, 3}}), "2(x3)");
  EXPECT_EQ(slurm_counts({{1, 1}, {3, 2}}), "1,3(x2)");
  EXPECT_EQ(slurm_counts({{2, 1}, {2, 2}, {1, 1}}), "2(x3),1");  // runs as a plan may give them
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

Config script(std::vector<std::string> args) {
  Config c;
  c.program = "train.py";
  c.program_args = std::move(args);
  c.python = "python3";
  return c;
}

TEST(LaunchSpec, LocalRankMacroAndLegacyArgument) {
  Config c = script({"--out", "run${local_rank}/x${local_rank}"});
  c.local_rank_arg = "underscore";
  LaunchSpec plan = make_launch_spec(c, second_node_of_three(), {});
  EXPECT_EQ(plan.workers[1].argv, (std::vector<std::string>{"python3", "-u", "train.py",
                                                            "--local_rank=1", "--out", "run1/x1"}));
  c.local_rank_arg = "dash";
  EXPECT_EQ(make_launch_spec(c, second_node_of_three(), {}).workers[0].argv[3], "--local-rank=0");
  c.local_rank_arg.clear();
  EXPECT_EQ(make_launch_spec(c, second_node_of_three(), {}).workers[0].argv.size(), 5u);
}

TEST(LaunchSpec, MpiStyleAgreesWithTheTorchVariables) {
  Config c = script({});
  c.env_mpi = true;
  JobLayout l = second_node_of_three();
  l.master_addr = "10.0.0.1";
  l.master_port = 6000;
  // The outer mpirun's own identity is replaced, not kept.
  LaunchSpec plan = make_launch_spec(c, l, {{"OMPI_COMM_WORLD_RANK", "9"}, {"PMIX_RANK", "9"}});
  for (const auto& w : plan.workers) {
    EXPECT_EQ(w.env.at("OMPI_COMM_WORLD_RANK"), w.env.at("RANK"));
    EXPECT_EQ(w.env.at("OMPI_COMM_WORLD_SIZE"), "5");
    EXPECT_EQ(w.env.at("OMPI_COMM_WORLD_LOCAL_RANK"), w.env.at("LOCAL_RANK"));
    EXPECT_EQ(w.env.at("OMPI_COMM_WORLD_LOCAL_SIZE"), "2");
    EXPECT_EQ(w.env.at("AZ_BATCH_MASTER_NODE"), "10.0.0.1:6000");
    EXPECT_EQ(w.env.at("AZ_BATCHAI_MPI_MASTER_NODE"), "10.0.0.1");
    EXPECT_FALSE(w.env.contains("PMIX_RANK"));
  }
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

TEST(TfConfig, FollowsTensorFlowsRules) {
  Topology t;
  t.nodes = {NodeEntry{0, "a", "10.0.0.1", 2, 0, {WorkerSlot{0, 0, 5001}, WorkerSlot{0, 1, 5002}}},
             NodeEntry{1, "b", "10.0.0.2", 1, 0, {WorkerSlot{0, 0, 6001}}}};
  assign_ranks(t);
  std::set<std::string> clusters;
  for (int node = 0; node < 2; ++node) {
    JobLayout l = layout_of(t, node, "job", "default", 0);
    for (int lr = 0; lr < l.local_world_size; ++lr) {
      auto doc = nlohmann::json::parse(tf_config(l, lr));
      clusters.insert(doc["cluster"].dump());
      EXPECT_EQ(doc["task"]["type"], "worker");
      EXPECT_EQ(doc["task"]["index"], l.rank_offset + lr);
      EXPECT_LT(doc["task"]["index"].get<size_t>(), doc["cluster"]["worker"].size());
    }
  }
  ASSERT_EQ(clusters.size(), 1u);
  EXPECT_EQ(*clusters.begin(), R"({"worker":["10.0.0.1:5001","10.0.0.1:5002","10.0.0.2:6001"]})");
  // Parameter-server jobs: chief first, then the ps tasks, then the workers,
  // with TensorFlow's rules (known task types, one chief, each index within
  // its list, every task once, the same cluster on every rank).
  std::set<std::string> ps_clusters;
  std::set<std::string> tasks;
  for (int node = 0; node < 2; ++node) {
    JobLayout l = layout_of(t, node, "job", "default", 0);
    for (int lr = 0; lr < l.local_world_size; ++lr) {
      auto doc = nlohmann::json::parse(tf_config(l, lr, TfRoles{true, 1}));
      ps_clusters.insert(doc["cluster"].dump());
      const std::string type = doc["task"]["type"];
      EXPECT_TRUE(type == "chief" || type == "ps" || type == "worker") << type;
      EXPECT_LT(doc["task"]["index"].get<size_t>(), doc["cluster"][type].size());
      tasks.insert(type + ":" + doc["task"]["index"].dump());
    }
  }
  ASSERT_EQ(ps_clusters.size(), 1u);
  EXPECT_EQ(*ps_clusters.begin(),
            R"({"chief":["10.0.0.1:5001"],"ps":["10.0.0.1:5002"],"worker":["10.0.0.2:6001"]})");
  EXPECT_EQ(tasks, (std::set<std::string>{"chief:0", "ps:0", "worker:0"}));
  // Without reserved ports there is no TF_CONFIG to give.
  EXPECT_EQ(tf_config(layout_of(uniform_topology(1, 2, 0, "a", "x", "x", 1), 0, "j", "r", 0), 0),
            "");
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

TEST(WorkerEnv, KeepsOnlyItsDifferenceFromWhatEveryWorkerInherits) {
  auto inherited = std::make_shared<const EnvMap>(
      EnvMap{{"PATH", "/bin"}, {"SLURM_PROCID", "0"}, {"PMIX_RANK", "3"}});
  WorkerEnv env(inherited, {{"PATH", "/bin"}, {"SLURM_PROCID", "5"}, {"RANK", "5"}});
  EXPECT_EQ(env.full(), (EnvMap{{"PATH", "/bin"}, {"SLURM_PROCID", "5"}, {"RANK", "5"}}));
  EXPECT_EQ(env.at("PATH"), "/bin");
  EXPECT_EQ(env.at("SLURM_PROCID"), "5");
  EXPECT_FALSE(env.contains("PMIX_RANK"));
  EXPECT_THROW((void)env.at("PMIX_RANK"), std::out_of_range);
  env.set("TORCHELASTIC_ERROR_FILE", "/tmp/e");
  env.erase("PATH");
  EXPECT_EQ(env.full(),
            (EnvMap{{"SLURM_PROCID", "5"}, {"RANK", "5"}, {"TORCHELASTIC_ERROR_FILE", "/tmp/e"}}));
  EXPECT_EQ(inherited->at("PATH"), "/bin") << "what others inherit is untouched";
}

TEST(WorkerEnv, ForEachVisitsExactlyTheFullEnvironmentInOrder) {
  // What the spawn path streams into envp must be full(), name for name.
  auto inherited = std::make_shared<const EnvMap>(
      EnvMap{{"A", "1"}, {"C", "3"}, {"E", "5"}, {"G", "7"}, {"I", "9"}});
  WorkerEnv env(inherited, {{"A", "1"}, {"B", "2"}, {"E", "50"}, {"G", "7"}, {"Z", "26"}});
  env.set("0FIRST", "x");
  std::vector<std::pair<std::string, std::string>> seen;
  env.for_each([&](const std::string& k, const std::string& v) { seen.emplace_back(k, v); });
  const EnvMap full = env.full();
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, std::string>>(full.begin(), full.end())));
  EXPECT_EQ(
      full,
      (EnvMap{{"0FIRST", "x"}, {"A", "1"}, {"B", "2"}, {"E", "50"}, {"G", "7"}, {"Z", "26"}}));
}

}  // namespace
}  // namespace ddplaunch
