#include <gtest/gtest.h>

#include <algorithm>

#include "cli/cli.hpp"
#include "cluster/precedence.hpp"
#include "config/launch_error.hpp"
#include "launcher/channel.hpp"
#include "launcher/forward.hpp"
#include "launcher/plan.hpp"

namespace ddplaunch {
namespace {

TEST(Channel, HeaderRoundTripsAnyBytesButNul) {
  ChannelHeader h;
  h.token = "t0k3n";
  h.env = {{"A", "1"}, {"B", "x=y\nz \xff"}, {"EMPTY", ""}};
  h.store_port = 40123;  // node 0's, which its agent picked
  const std::string bytes = encode_channel_header(h) + "\x02\x0f";
  for (size_t cut = 0; cut < bytes.size() - 2; ++cut) {
    size_t consumed = 99;
    EXPECT_FALSE(decode_channel_header(std::string_view(bytes).substr(0, cut), consumed)) << cut;
    EXPECT_EQ(consumed, 0U);
  }
  size_t consumed = 0;
  const auto got = decode_channel_header(bytes, consumed);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, h);
  EXPECT_EQ(bytes.substr(consumed), "\x02\x0f");
}

TEST(Channel, NotAHeaderIsAnError) {
  size_t consumed = 0;
  EXPECT_THROW(decode_channel_header("hello\n", consumed), std::runtime_error);
  EXPECT_THROW(
      decode_channel_header(std::string(k_channel_magic) + std::string("novalue\0\0", 9), consumed),
      std::runtime_error);
  EXPECT_THROW(decode_channel_header(
                   std::string(k_channel_magic) + std::string("store_port=0\0\0", 14), consumed),
               std::runtime_error);
  const std::string huge = std::string(k_channel_magic) + "env=A=" + std::string(2 << 20, 'x');
  EXPECT_THROW(decode_channel_header(huge, consumed), std::runtime_error);
}

TEST(Forward, GlobsMatchAsTheShellsStar) {
  EXPECT_TRUE(glob_match("NCCL_*", "NCCL_DEBUG"));
  EXPECT_TRUE(glob_match("*_HOME", "CUDA_HOME"));
  EXPECT_TRUE(glob_match("A*B*C", "AxxBxxC"));
  EXPECT_FALSE(glob_match("NCCL_*", "XNCCL_DEBUG"));
  EXPECT_FALSE(glob_match("PATH", "PATHX"));
  EXPECT_TRUE(glob_match("*", ""));
}

TEST(Forward, DefaultsExportsAndPatterns) {
  const EnvMap env = {{"NCCL_DEBUG", "INFO"},
                      {"PATH", "/venv/bin:/usr/bin"},
                      {"HOME", "/root"},
                      {"SSH_CLIENT", "x"},
                      {"CUDA_VISIBLE_DEVICES", "0"},
                      {"DDPLAUNCH_RDZV_TOKEN", "secret"},
                      {"MINE", "1"},
                      {"LAB_X", "2"},
                      {"PYTHONPATH", "/src"}};
  using Vars = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(forwarded_environment(env, {}, {}),
            (Vars{{"NCCL_DEBUG", "INFO"}, {"PATH", "/venv/bin:/usr/bin"}, {"PYTHONPATH", "/src"}}));
  EXPECT_EQ(forwarded_environment(env, {"MINE", "NEW=v=w", "UNSET"}, {"LAB_*", "none"}),
            (Vars{{"LAB_X", "2"}, {"MINE", "1"}, {"NEW", "v=w"}}));
  // -x reaches even what no pattern may forward.
  EXPECT_EQ(forwarded_environment(env, {"HOME"}, {"none"}), (Vars{{"HOME", "/root"}}));
}

TEST(Forward, TheUsersOpenMpiSettingsTravelAnOuterMpirunsIdentityNever) {
  const EnvMap env = {{"OMPI_MCA_mpi_yield_when_idle", "1"},
                      {"OMPI_MCA_orte_base_help_aggregate", "0"},
                      {"OMPI_MCA_orte_hnp_uri", "1.0;tcp://10.0.0.1:5"},
                      {"OMPI_MCA_orte_tmpdir_base", "/tmp"},  // that mpirun's default
                      {"OMPI_COMM_WORLD_RANK", "0"},
                      {"PMIX_RANK", "0"}};
  using Vars = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(forwarded_environment(env, {}, {}), (Vars{{"OMPI_MCA_mpi_yield_when_idle", "1"},
                                                      {"OMPI_MCA_orte_base_help_aggregate", "0"}}));
}

CommandLine parse_command(std::vector<std::string> args) {
  return parse_command_line(args);
}

HostsPlan plan_of(const std::vector<std::string>& args, std::vector<bool> local = {},
                  bool node0_picks = false) {
  const CommandLine cl = parse_command(args);
  const Config config = resolve(cl, {});
  PlanContext ctx;
  ctx.node0_picks_store_port = node0_picks;
  ctx.hosts = order_hosts(config, config.hosts);
  ctx.is_local = local.empty() ? std::vector<bool>(ctx.hosts.size(), false) : local;
  ctx.self_path = "/opt/ddp/bin/ddplaunch";
  ctx.cwd = "/home/u/proj";
  ctx.master_port = 29500;
  return plan_hosts(config, cl, ctx);
}

TEST(Plan, EachHostGetsItsRankSlotsAndTheSameMaster) {
  const auto plan = plan_of({"--hosts", "a:4,b:2", "--max-restarts", "2", "--", "train.py", "x y"});
  ASSERT_EQ(plan.starts.size(), 2U);
  EXPECT_EQ(plan.nnodes, 2);
  EXPECT_EQ(plan.master_addr, "a");
  const auto& b = plan.starts[1];
  EXPECT_EQ(b.node_rank, 1);
  EXPECT_EQ(b.host, "b");
  EXPECT_EQ(b.argv.front(), "ssh");
  EXPECT_EQ(b.argv[b.argv.size() - 2], "b");
  const std::string& cmd = b.argv.back();
  for (const char* part : {"cd /home/u/proj && ", "--node-rank=1", "--nproc-per-node=2",
                           "--nnodes=2", "--master-addr=a", "--master-port=29500",
                           "--max-restarts=2", "--launcher-channel", "-- train.py 'x y'"}) {
    EXPECT_NE(cmd.find(part), std::string::npos) << part << " in " << cmd;
  }
  EXPECT_EQ(cmd.find("--hosts"), std::string::npos) << cmd;
}

TEST(Plan, ARemoteNodeZeroPicksItsStorePortWhereNobodyChoseOne) {
  const auto plan = plan_of({"--hosts", "a,b", "--", "t"}, {}, true);
  ASSERT_EQ(plan.starts.size(), 2U);
  EXPECT_NE(plan.starts[0].argv.back().find("--pick-store-port"), std::string::npos);
  EXPECT_EQ(plan.starts[1].argv.back().find("--pick-store-port"), std::string::npos);
}

TEST(Plan, MasterAddrPicksNodeZeroAndLocalHostsRunWithoutSsh) {
  const auto plan =
      plan_of({"--hosts", "a,b,c", "--master-addr", "c", "--", "t"}, {true, false, false});
  ASSERT_EQ(plan.starts.size(), 3U);
  EXPECT_EQ(plan.master_addr, "c");
  EXPECT_EQ(plan.starts[0].host, "c");  // node 0 first
  EXPECT_EQ(plan.starts[0].node_rank, 0);
  // is_local follows the ordered list: c (node 0) is here.
  EXPECT_TRUE(plan.starts[0].local);
  EXPECT_EQ(plan.starts[0].argv.front(), "/opt/ddp/bin/ddplaunch");
}

TEST(Plan, ContradictionsAreUsageErrors) {
  EXPECT_THROW(plan_of({"--hosts", "a,b", "--node-rank", "1", "--", "t"}), UsageError);
  EXPECT_THROW(plan_of({"--hosts", "a,b", "--nnodes", "3", "--", "t"}), UsageError);
  EXPECT_NO_THROW(plan_of({"--hosts", "a,b", "--nnodes", "2", "--", "t"}));
}

TEST(Plan, UserSshArgsComeFirstAndPortIsPassed) {
  const auto plan = plan_of({"--hosts", "a", "--ssh-args", "-F cfg -o ConnectTimeout=3",
                             "--ssh-port", "2222", "--", "t"});
  const auto& argv = plan.starts[0].argv;
  ASSERT_GE(argv.size(), 6U);
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + 5),
            (std::vector<std::string>{"ssh", "-F", "cfg", "-o", "ConnectTimeout=3"}));
  EXPECT_NE(std::find(argv.begin(), argv.end(), "2222"), argv.end());
}

TEST(Plan, AboveTheFanoutHostsGoInContiguousSubtrees) {
  std::string list;
  for (int i = 0; i < 10; ++i) {
    list += (i ? "," : "") + std::string("h") + std::to_string(i) + ":2";
  }
  const auto plan = plan_of({"--hosts", list, "--fanout", "3", "--", "t"},
                            {true, false, false, false, false, false, false, false, false, false});
  // h0 here; h1..h9 in three groups of three.
  ASSERT_EQ(plan.starts.size(), 4U);
  EXPECT_TRUE(plan.starts[0].local);
  int covered = 1;
  for (size_t i = 1; i < plan.starts.size(); ++i) {
    const auto& s = plan.starts[i];
    EXPECT_EQ(s.hosts, 3);
    EXPECT_EQ(s.node_rank, covered);
    const std::string& cmd = s.argv.back();
    EXPECT_NE(cmd.find("--subtree=" + std::to_string(covered)), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("--fanout=3"), std::string::npos) << cmd;
    covered += s.hosts;
  }
  EXPECT_EQ(covered, 10);
}

TEST(Plan, OnlyNodeZeroWritesTheSummary) {
  const auto plan = plan_of({"--hosts", "a,b", "--summary-json", "/shared/s.json", "--", "t"});
  EXPECT_NE(plan.starts[0].argv.back().find("--summary-json=/shared/s.json"), std::string::npos);
  EXPECT_EQ(plan.starts[1].argv.back().find("--summary-json"), std::string::npos);
}

TEST(Plan, QuotingSurvivesAPosixShell) {
  EXPECT_EQ(shell_quote("plain-word_1.2"), "plain-word_1.2");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("it's $HOME"), "'it'\\''s $HOME'");
}

}  // namespace
}  // namespace ddplaunch
