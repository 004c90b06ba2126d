// The cluster detectors over recorded environments (what srun and mpirun set),
// and the precedence between them.
#include <gtest/gtest.h>

#include "cli/cli.hpp"
#include "cluster/openmpi.hpp"
#include "cluster/precedence.hpp"
#include "cluster/slurm.hpp"
#include "config/launch_error.hpp"
#include "mpi/pmix_exchange.hpp"
#include "posix/interfaces.hpp"

namespace ddplaunch {
namespace {

// `srun -N2 --ntasks-per-node=1 ddplaunch ...`, as seen by the task on the second node.
EnvMap srun_second_node() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_JOB_NODELIST", "gpu-[07-08]"},
          {"SLURM_NNODES", "2"},
          {"SLURM_JOB_NUM_NODES", "2"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NODELIST", "gpu-[07-08]"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_NODEID", "1"},
          {"SLURM_PROCID", "1"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NTASKS", "2"},
          {"SLURMD_NODENAME", "gpu-08"}};
}

Config configure_args(const std::vector<std::string>& args, const EnvMap& env,
                      const ClusterFiles& files = {}) {
  return configure(parse_command_line(args), env, files);
}

TEST(Slurm, AnSrunStepGivesTheWholeJob) {
  Config c = configure_args({"--nproc-per-node", "2", "train"}, srun_second_node());
  EXPECT_EQ(c.nnodes, 2);
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.master_addr, "gpu-07");
  EXPECT_EQ(c.rdzv_id, "slurm-4242.0");
  EXPECT_EQ(c.source_of("nnodes"), "SLURM_STEP_NUM_NODES");
  EXPECT_EQ(c.source_of("node_rank"), "SLURM_NODEID");
  EXPECT_EQ(c.source_of("master_addr"), "SLURM_STEP_NODELIST");
  // The same port on every node of the step, away from the default.
  EnvMap first = srun_second_node();
  first["SLURM_NODEID"] = "0";
  first["SLURM_PROCID"] = "0";
  EXPECT_EQ(configure_args({"train"}, first).master_port, c.master_port);
  EXPECT_NE(c.master_port, 29500);
  EXPECT_GE(c.master_port, 20000);
}

TEST(Slurm, TwoTasksOnANodeAreRefusedWithHowToCallSrun) {
  EnvMap env = srun_second_node();
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  try {
    configure_args({"train"}, env);
    FAIL();
  } catch (const UsageError& e) {
    // srun ignores --ntasks-per-node=1 alone inside such an allocation: -n
    // with the allocation's node count is what works there.
    EXPECT_NE(std::string(e.what()).find("srun -n 2 --ntasks-per-node=1 ddplaunch"),
              std::string::npos)
        << e.what();
  }
}

TEST(Slurm, ABatchScriptOutsideSrunStartsEveryNodeThroughSrun) {
  EnvMap env = {{"SLURM_JOB_ID", "7"},
                {"SLURM_JOB_NODELIST", "n[1-4]"},
                {"SLURM_NNODES", "4"},
                {"SLURM_NODEID", "0"},
                {"SLURM_TASKS_PER_NODE", "1(x4)"}};
  Config c = configure_args({"train"}, env);
  EXPECT_EQ(c.slurm_nodes, 4);
  EXPECT_TRUE(c.starts_agents());
  // --nnodes 1 keeps it on the batch host, and says so.
  Config here = configure_args({"--nnodes", "1", "train"}, env);
  EXPECT_EQ(here.slurm_nodes, 0);
  EXPECT_FALSE(here.starts_agents());
  ASSERT_EQ(here.notes.size(), 1u);
  EXPECT_NE(here.notes[0].find("--nnodes 1 keeps the job on this node"), std::string::npos);
  // A host list wins over the allocation.
  EXPECT_EQ(configure_args({"--hosts", "a,b", "train"}, env).slurm_nodes, 0);
  // A one-node allocation runs here.
  env["SLURM_NNODES"] = "1";
  EXPECT_FALSE(configure_args({"train"}, env).starts_agents());
}

TEST(Slurm, SrunLauncherOutsideAnAllocationIsAUsageError) {
  EXPECT_THROW(configure_args({"--launcher", "srun", "train"}, {}), UsageError);
}

TEST(Slurm, AFlagWinsAndTheDisagreementIsSaid) {
  EnvMap first = srun_second_node();
  first["SLURM_NODEID"] = "0";
  Config c = configure_args({"--nnodes", "1", "train"}, first);
  EXPECT_EQ(c.nnodes, 1);
  bool said = false;
  for (const auto& n : c.notes) {
    said = said || n.find("--nnodes 1 from the command line wins over $SLURM_STEP_NUM_NODES=2") !=
                       std::string::npos;
  }
  EXPECT_TRUE(said);
  // On the second node the scheduler's node rank does not fit the flag: said, naming both.
  try {
    configure_args({"--nnodes", "1", "train"}, srun_second_node());
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("$SLURM_NODEID"), std::string::npos) << e.what();
  }
}

TEST(Slurm, NoSlurmNoValues) {
  EXPECT_TRUE(detect_slurm({{"PATH", "/bin"}}).values.empty());
}

// `mpirun -np 2 ddplaunch ...` on one host, as seen by the second process.
EnvMap mpirun_one_host() {
  return {{"OMPI_COMM_WORLD_SIZE", "2"},
          {"OMPI_COMM_WORLD_RANK", "1"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
          {"OMPI_COMM_WORLD_NODE_RANK", "1"},
          {"PMIX_NAMESPACE", "prterun-host-1234@1"},
          {"PMIX_RANK", "1"}};
}

TEST(OpenMpi, OneProcessPerNodeMakesTheNodeRanks) {
  Config c = configure_args({"train"}, mpirun_one_host());
  EXPECT_EQ(c.nnodes, 2);
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.rdzv_id, "mpirun-prterun-host-1234@1");
  EXPECT_EQ(c.source_of("node_rank"), "OMPI_COMM_WORLD_RANK");
  EnvMap other = mpirun_one_host();
  other["PMIX_NAMESPACE"] = "prterun-host-999@1";
  EXPECT_NE(configure_args({"train"}, other).master_port, c.master_port)
      << "two mpirun jobs on one host do not meet";
}

TEST(OpenMpi, AzureNamesTheMaster) {
  EnvMap env = mpirun_one_host();
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "1";
  env["AZ_BATCH_MASTER_NODE"] = "10.0.0.4:6105";
  Config c = configure_args({"train"}, env);
  EXPECT_EQ(c.master_addr, "10.0.0.4");
  EXPECT_EQ(c.master_port, 6105);
  EXPECT_EQ(c.source_of("master_addr"), "AZ_BATCH_MASTER_NODE");
}

TEST(OpenMpi, SeveralHostsWithoutAMasterAskForOne) {
  EnvMap env = mpirun_one_host();
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "1";
  EXPECT_THROW(configure_args({"train"}, env), UsageError);
  Config c = configure_args({"--master-addr", "host0", "train"}, env);
  EXPECT_EQ(c.master_addr, "host0");
}

TEST(OpenMpi, APmixServerGivesNodeZerosAddressAcrossHosts) {
  EnvMap env = mpirun_one_host();
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "1";  // one process on each of two hosts
  env["PMIX_SERVER_URI41"] = "2069626880.0;tcp4://127.0.0.1:51623";
  Config c = configure_args({"train"}, env);
  EXPECT_TRUE(c.master_via_pmix);
  EXPECT_EQ(c.source_of("master_addr"), "PMIx");
  EXPECT_EQ(c.node_rank, 1);
  // A flag, or Azure's variable, names node 0 instead: no exchange.
  EXPECT_FALSE(configure_args({"--master-addr", "host0", "train"}, env).master_via_pmix);
  env["AZ_BATCH_MASTER_NODE"] = "10.0.0.4:6105";
  EXPECT_FALSE(configure_args({"train"}, env).master_via_pmix);
}

TEST(OpenMpi, NodeZerosAddressIsTheOneOnASharedNetwork) {
  const std::vector<std::string> node0 = {"192.168.1.5", "10.1.0.5", "fd00::5"};
  EXPECT_EQ(choose_master_addr(node0, {"127.0.0.1/8", "10.1.0.7/16"}), "10.1.0.5");
  EXPECT_EQ(choose_master_addr(node0, {"fd00::7/64"}), "fd00::5");
  EXPECT_EQ(choose_master_addr(node0, {"172.16.0.1/12"}), "192.168.1.5") << "else the first";
  EXPECT_EQ(choose_master_addr({}, {"10.1.0.7/16"}), "127.0.0.1");
  EXPECT_TRUE(posix::in_network("10.1.255.1", "10.1.0.7/16"));
  EXPECT_FALSE(posix::in_network("10.2.0.1", "10.1.0.7/16"));
  EXPECT_TRUE(posix::in_network("10.2.0.1", "10.1.0.7/0"));
  EXPECT_FALSE(posix::in_network("10.1.0.1", "fd00::1/64"));
  EXPECT_FALSE(posix::in_network("10.1.0.1", "10.1.0.1"));
  EXPECT_FALSE(posix::in_network("10.1.0.1", "10.1.0.1/33"));
}

// Every 127.x address is on lo (Linux answers for 127.0.0.0/8 there): two
// agents on one host with --local-addr 127.0.0.1 and 127.0.0.2 both give their
// workers GLOO_SOCKET_IFNAME=lo. Other interfaces hold their own addresses only.
TEST(Interfaces, ALoopbackAddressIsHeldByLoWhicheverItIs) {
  const std::vector<posix::Interface> ifaces = {{"eth0", "10.1.0.7", 16, false, false},
                                                {"lo", "127.0.0.1", 8, true, false}};
  EXPECT_EQ(posix::interface_holding("127.0.0.1", ifaces)->name, "lo");
  EXPECT_EQ(posix::interface_holding("127.0.0.2", ifaces)->name, "lo");
  EXPECT_EQ(posix::interface_holding("10.1.0.7", ifaces)->name, "eth0");
  EXPECT_FALSE(posix::interface_holding("10.1.0.8", ifaces)) << "a neighbour's address";
}

TEST(Platform, KubeflowPodsNameTheirNodeByRank) {
  // A PyTorchJob worker pod (operator without nprocPerNode): worker 0 is RANK 1.
  EnvMap pod = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                {"MASTER_ADDR", "job-master-0"},
                {"MASTER_PORT", "23456"},
                {"WORLD_SIZE", "3"},
                {"RANK", "1"},
                {"PYTHONUNBUFFERED", "0"}};
  Config c = configure_args({"train"}, pod);
  EXPECT_EQ(c.nnodes, 3);
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.master_addr, "job-master-0");
  EXPECT_EQ(c.master_port, 23456);
  EXPECT_EQ(c.source_of("node_rank"), "RANK");
  // With torchrun's variables the operator has said it there: PET_* only.
  pod["PET_NNODES"] = "3";
  pod["WORLD_SIZE"] = "12";
  c = configure_args({"train"}, pod);
  EXPECT_EQ(c.nnodes, 3);
  EXPECT_EQ(c.source_of("node_rank"), "default");
  EXPECT_TRUE(c.notes.empty()) << c.notes.front();
}

// An Indexed Job's or a JobSet's pod, with the variables the controllers set:
// JOB_COMPLETION_INDEX is the node rank, node 0 the index-0 pod's stable name.
TEST(Platform, AJobSetPodFindsItsRankAndNodeZerosName) {
  EnvMap pod = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                {"HOSTNAME", "train-workers-0-2"},
                {"JOBSET_NAME", "train"},
                {"REPLICATED_JOB_NAME", "workers"},
                {"JOB_INDEX", "0"},
                {"JOB_COMPLETION_INDEX", "2"}};
  Config c = configure_args({"--nnodes", "4", "train.py"}, pod);
  EXPECT_EQ(c.node_rank, 2);
  EXPECT_EQ(c.source_of("node_rank"), "JOB_COMPLETION_INDEX");
  EXPECT_EQ(c.master_addr, "train-workers-0-0.train") << "JobSet's default subdomain: its name";
  EXPECT_EQ(c.rdzv_id, "train");
  // The pods hold no node count: --nnodes is asked for, by name.
  try {
    configure_args({"train.py"}, pod);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("give --nnodes"), std::string::npos) << e.what();
  }
  // A second Job of the replicated job repeats the completion indexes.
  pod["JOB_INDEX"] = "1";
  try {
    configure_args({"train.py"}, pod);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--node-rank and --nnodes"), std::string::npos);
  }
}

TEST(Platform, AnIndexedJobPodIsToldHowToNameNodeZero) {
  EnvMap pod = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                {"HOSTNAME", "llama-3"},
                {"JOB_COMPLETION_INDEX", "3"}};
  try {
    configure_args({"--nnodes", "4", "train.py"}, pod);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--master-addr llama-0.SERVICE"), std::string::npos)
        << e.what();
  }
  Config c =
      configure_args({"--nnodes", "4", "--master-addr", "llama-0.llama-svc", "train.py"}, pod);
  EXPECT_EQ(c.node_rank, 3);
  EXPECT_EQ(c.master_addr, "llama-0.llama-svc");
  // An operator that sets MASTER_ADDR (PyTorchJob) is read as before.
  pod["MASTER_ADDR"] = "job-master-0";
  pod["WORLD_SIZE"] = "4";
  pod["RANK"] = "3";
  EXPECT_EQ(configure_args({"train.py"}, pod).master_addr, "job-master-0");
}

TEST(Platform, AzurePyTorchConfigurationGivesNodeRank) {
  EnvMap node = {{"AZUREML_RUN_ID", "run_1"}, {"MASTER_ADDR", "10.0.0.4"}, {"MASTER_PORT", "6105"},
                 {"WORLD_SIZE", "2"},         {"NODE_RANK", "1"},          {"RANK", "7"}};
  Config c = configure_args({"train"}, node);
  EXPECT_EQ(c.nnodes, 2);
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.source_of("node_rank"), "NODE_RANK");
  EXPECT_EQ(c.source_of("master_addr"), "MASTER_ADDR");
}

TEST(Platform, StrayVariablesInAShellAreNotAJob) {
  Config c = configure_args(
      {"train"},
      {{"MASTER_ADDR", "10.0.0.4"}, {"WORLD_SIZE", "8"}, {"RANK", "3"}, {"NODE_RANK", "1"}});
  EXPECT_EQ(c.nnodes, 1);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
}

TEST(Precedence, TorchrunVariablesWinOverTheScheduler) {
  EnvMap env = srun_second_node();
  env["PET_MASTER_ADDR"] = "login1";
  Config c = configure_args({"train"}, env);
  EXPECT_EQ(c.master_addr, "login1");
  EXPECT_EQ(c.source_of("master_addr"), "PET_MASTER_ADDR");
  EXPECT_EQ(c.node_rank, 1);
}

// Kubeflow Trainer's MPI runtime: each node's pod has the hostfile at
// /etc/mpi/hostfile, and its own name as its host name.
ClusterFiles trainer_hostfile(const std::string& hostname, const std::string& text) {
  return {k_mpi_hostfile, text, hostname};
}

const EnvMap k_pod = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};

TEST(MpiHostfile, TrainersHostfileGivesTheShapeThisNodesRankAndNodeZero) {
  const std::string text =
      "# made by the MPI plugin\n"
      "job-node-0-0.job slots=4\n"
      "job-node-0-1.job slots=4\n\n"
      "job-node-0-2.job slots=2 max_slots=2\n";
  const Config c = configure_args({"train.py"}, k_pod, trainer_hostfile("job-node-0-2", text));
  EXPECT_EQ(c.nnodes, 3);
  EXPECT_EQ(c.node_rank, 2);
  EXPECT_EQ(c.nproc_per_node, 2);
  EXPECT_EQ(c.master_addr, "job-node-0-0.job");
  EXPECT_EQ(c.source_of("node_rank"), "/etc/mpi/hostfile");
  // MPICH's spelling, and a host named by its full name.
  const Config m =
      configure_args({"./app"}, k_pod, trainer_hostfile("b.job", "a.job:2\nb.job:2\n"));
  EXPECT_EQ(m.node_rank, 1);
  EXPECT_EQ(m.nproc_per_node, 2);
}

TEST(MpiHostfile, FlagsAndTorchrunsVariablesWinAndOutsideAPodItIsNotRead) {
  const std::string text = "a slots=2\nb slots=2\n";
  EnvMap pet = k_pod;
  pet["PET_NNODES"] = "1";
  EXPECT_EQ(configure_args({"x"}, pet, trainer_hostfile("b", text)).nnodes, 1);
  EXPECT_EQ(configure_args({"--nproc-per-node", "3", "x"}, k_pod, trainer_hostfile("b", text))
                .nproc_per_node,
            3);
  // A hostfile on a workstation, outside any pod, shapes nothing.
  EXPECT_EQ(configure_args({"x"}, {}, trainer_hostfile("b", text)).nnodes, 1);
  // Unless OMPI_MCA_orte_default_hostfile names it.
  EXPECT_EQ(configure_args({"x"}, {{"OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"}},
                           trainer_hostfile("b", text))
                .nnodes,
            2);
}

TEST(MpiHostfile, AHostItDoesNotListOrALineItCannotReadIsAUsageError) {
  auto error = [](const ClusterFiles& files) {
    try {
      configure_args({"x"}, k_pod, files);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(trainer_hostfile("c", "a\nb\n")),
            "this host (c) is not in /etc/mpi/hostfile: run ddplaunch on the hosts it lists, or "
            "give --nnodes and --node-rank");
  EXPECT_EQ(error(trainer_hostfile("a", "a slots=x\n")),
            "/etc/mpi/hostfile: line 1 has a slot count that is not a positive number: fix it, or "
            "give --nnodes and --node-rank");
  EXPECT_EQ(error(trainer_hostfile("a", "# nothing\n")),
            "/etc/mpi/hostfile lists no host: fix it, or give --nnodes and --node-rank");
  // --nnodes given: said, and the job goes on with the command line's shape.
  EXPECT_NO_THROW(configure(parse_command_line({"--nnodes", "1", "x"}), k_pod,
                            trainer_hostfile("c", "a\nb\n")));
}

}  // namespace
}  // namespace ddplaunch
