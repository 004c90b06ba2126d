// What a node's PMIx server registers, derived from ddplaunch's layout, and
// the store keys of a fence; Open MPI's defaults. Pure functions, by table.
#include <gtest/gtest.h>

#include "env/mpi_env.hpp"
#include "mpi/pmix_job.hpp"

namespace ddplaunch {
namespace {

JobLayout layout(int node_rank, std::vector<SizeRun> sizes) {
  JobLayout l;
  l.node_rank = node_rank;
  l.node_sizes = std::move(sizes);
  l.nnodes = 0;
  l.world_size = 0;
  for (const auto& r : l.node_sizes) {
    l.nnodes += r.count;
    l.world_size += r.nproc * r.count;
  }
  l.run_id = "job 7/x";
  l.round = 2;
  l.restart_count = 1;
  l.hostname = "me";
  return l;
}

TEST(PmixJob, MapsRanksToNodesInRankOrder) {
  const PmixJob job = make_pmix_job(layout(1, {{2, 2}, {3, 1}}), {"a", "b", "c"});
  EXPECT_EQ(job.nspace, "ddplaunch.job_7_x.2.1");
  EXPECT_EQ(job.world_size, 7);
  EXPECT_EQ(job.node_list(), "a,b,c");
  EXPECT_EQ(job.proc_list(), "0,1;2,3;4,5,6");
  EXPECT_EQ(job.local_peers(), "2,3");
  EXPECT_EQ(job.local_first(), 2);
  EXPECT_EQ(job.local_size(), 2);
  EXPECT_EQ(job.node_of(0), 0);
  EXPECT_EQ(job.node_of(3), 1);
  EXPECT_EQ(job.node_of(6), 2);
  EXPECT_EQ(job.node_of(7), -1);
  EXPECT_EQ(job.node_of(-1), -1);
  EXPECT_FALSE(job.cohosted);
}

TEST(PmixJob, NodesOnOneHostGetNamesOfTheirOwn) {
  const PmixJob job = make_pmix_job(layout(0, {{1, 3}}), {"vm", "vm", ""});
  EXPECT_EQ(job.hosts, (std::vector<std::string>{"vm", "vm.n1", "node2"}));
  EXPECT_TRUE(job.cohosted);
  // This node's own name is known even where the plan carried none.
  EXPECT_EQ(make_pmix_job(layout(1, {{1, 2}}), {}).hosts,
            (std::vector<std::string>{"node0", "me"}));
}

TEST(PmixJob, NamespacesStayNamesWhateverTheRunId) {
  EXPECT_EQ(pmix_nspace("a.b c", "", 0, 0), "ddplaunch.a_b_c.0.0");
  EXPECT_LE(pmix_nspace(std::string(1000, 'x'), std::string(1000, 'y'), 99, 99).size(), 255u);
}

TEST(PmixJob, TwoJobsWithTheDefaultRunIdGetTwoNamespaces) {
  // Open MPI names its job, its shared-memory files and its session
  // directory after the namespace: two jobs of one host must differ.
  EXPECT_EQ(pmix_nspace("none", "3f2a", 1, 0), "ddplaunch.none.3f2a.1.0");
  EXPECT_NE(pmix_nspace("none", "3f2a", 0, 0), pmix_nspace("none", "77b0", 0, 0));
  JobLayout layout;
  layout.job_id = "a.b";
  EXPECT_EQ(make_pmix_job(layout, {}).nspace, "ddplaunch.none.a_b.0.0");
}

TEST(PmixJob, FenceKeysAreOnePerParticipantUnderTheFencesSequence) {
  const FenceKeys k = fence_keys("ns", "all", 3, {0, 2});
  EXPECT_EQ(k.records, (std::vector<std::string>{"mpi/ns/fence/all/3/0", "mpi/ns/fence/all/3/2"}));
  EXPECT_EQ(k.counter, "mpi/ns/fence/all/3/arrived");
  EXPECT_EQ(k.done, "mpi/ns/fence/all/3/done");
}

TEST(OpenMpiDefaults, SetOnlyWhatTheUserDidNot) {
  JobLayout l = layout(0, {{2, 1}});
  l.socket_ifname = "eth1";
  OpenMpiHost host{"/job", false, false, "seccomp"};
  auto d = open_mpi_defaults({}, l, host);
  EnvMap got(d.begin(), d.end());
  EXPECT_EQ(got["OMPI_MCA_btl_tcp_if_include"], "eth1");
  EXPECT_EQ(got["OMPI_MCA_schizo"], "ompi");
  // Every file Open MPI makes for the job goes where ddplaunch removes it.
  EXPECT_EQ(got["OMPI_MCA_orte_tmpdir_base"], "/job");
  EXPECT_EQ(got["OMPI_MCA_btl_vader_backing_directory"], "/job");
  EXPECT_EQ(got["OMPI_MCA_btl_vader_single_copy_mechanism"], "none");
  EXPECT_FALSE(got.contains("OMPI_MCA_mpi_yield_when_idle"));
  d = open_mpi_defaults(
      {{"OMPI_MCA_btl_tcp_if_exclude", "lo"}, {"OMPI_MCA_orte_tmpdir_base", "/scratch"}}, l, host);
  got = EnvMap(d.begin(), d.end());
  EXPECT_FALSE(got.contains("OMPI_MCA_btl_tcp_if_include"));
  EXPECT_FALSE(got.contains("OMPI_MCA_orte_tmpdir_base")) << "the user's own wins";
  EXPECT_TRUE(is_outer_step_identity("PMI_RANK"));
  EXPECT_FALSE(is_outer_step_identity("SLURM_STEP_ID"));
}

TEST(OpenMpiDefaults, CmaWhereItWorksAndYieldingWhereRanksOutnumberCpus) {
  const JobLayout l = layout(0, {{4, 1}});
  auto d = open_mpi_defaults({}, l, OpenMpiHost{"/job", true, true, "works"});
  EnvMap got(d.begin(), d.end());
  EXPECT_FALSE(got.contains("OMPI_MCA_btl_vader_single_copy_mechanism"))
      << "Open MPI's own choice (CMA), as under mpirun";
  EXPECT_EQ(got["OMPI_MCA_mpi_yield_when_idle"], "1");
  d = open_mpi_defaults({{"OMPI_MCA_mpi_yield_when_idle", "0"}}, l,
                        OpenMpiHost{"/job", true, true, "works"});
  got = EnvMap(d.begin(), d.end());
  EXPECT_FALSE(got.contains("OMPI_MCA_mpi_yield_when_idle")) << "the user's own wins";
}

TEST(OpenMpiIdentity, WhatMpirunGivesBeforeMpiInit) {
  EnvMap env;
  JobLayout l = layout(1, {{2, 2}});
  l.rank_offset = 2;
  l.local_world_size = 2;
  add_open_mpi_identity(env, l, 1);
  EXPECT_EQ(env["OMPI_COMM_WORLD_RANK"], "3");
  EXPECT_EQ(env["OMPI_COMM_WORLD_SIZE"], "4");
  EXPECT_EQ(env["OMPI_COMM_WORLD_LOCAL_RANK"], "1");
  EXPECT_EQ(env["OMPI_COMM_WORLD_LOCAL_SIZE"], "2");
  EXPECT_EQ(env["OMPI_UNIVERSE_SIZE"], "4");
  EXPECT_FALSE(env.contains("AZ_BATCH_MASTER_NODE")) << "that is --env-style mpi's";
}

TEST(PmixJob, RanksOnThisHostCountEveryNodeSharingIt) {
  JobLayout l = layout(1, {{2, 3}});
  EXPECT_EQ(make_pmix_job(l, {"a", "b", "a"}).host_ranks, 2);
  EXPECT_EQ(make_pmix_job(l, {"a", "a", "a"}).host_ranks, 6);
}

}  // namespace
}  // namespace ddplaunch
