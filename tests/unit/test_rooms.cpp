// The rooms around the Agent, each against a fake RoundView: StatusRoom
// (filters, the job on node 0 only, lost nodes from verdicts, a rank's
// state and progress age, GPU memory by process), JobEvents (what each
// event carries, the job's events on node 0 only) and StacksRoom (its
// filter, an ended rank's record without a debugger); and MpiRound, the
// round's MPI side, against a fake PMIx server.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/job_events.hpp"
#include "agent/mpi_round.hpp"
#include "agent/stack_capture.hpp"
#include "agent/stacks_room.hpp"
#include "agent/status_room.hpp"
#include "ddplaunch/error.hpp"
#include "output/router.hpp"
#include "scratch_dir.hpp"
#include "status/status_codec.hpp"
#include "store/protocol.hpp"

namespace ddplaunch {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

struct FakeClock : Clock {
  TimePoint t{std::chrono::seconds(1000)};
  TimePoint now() const override { return t; }
  double wall_now() const override {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  }
};

// A round of two local ranks (global 4 and 5) on node `node_rank` of two.
struct FakeView : RoundView {
  Round r;
  std::vector<pid_t> worker_pids;
  std::vector<Rank> ranks;
  Topology topology;
  explicit FakeView(int node_rank) {
    topology.nodes = {NodeEntry{0, "a", "10.0.0.1", 2, 0, {}},
                      NodeEntry{1, "b", "10.0.0.2", 2, 0, {}}};
    r.node_rank = node_rank;
    r.speaks_for_job = node_rank == 0;
    r.state = "running";
    r.round = 1;
    r.restarts = 1;
    r.nnodes = 2;
    r.world_size = 4;
    r.first_rank = 4;
    r.start_time = 990;
    r.agent_start_time = 900;
    r.topology = &topology;
    // Real processes (this test's) so that /proc has a tree to read.
    worker_pids = {::getpid(), ::getpid()};
    for (int i = 0; i < 2; ++i) {
      Rank k;
      k.rank = 4 + i;
      k.local_rank = i;
      k.pid = ::getpid();
      k.progress_events = 3;
      k.last_progress = Clock::TimePoint(std::chrono::seconds(996));
      k.last_line = "epoch " + std::to_string(i);
      ranks.push_back(k);
    }
  }
  Round round() const override { return r; }
  const std::vector<pid_t>& pids() const override { return worker_pids; }
  Rank rank(size_t i) const override { return ranks.at(i); }
};

struct RoomTest : ::testing::Test {
  Config config;
  NodeIdentity self{"b", "10.0.0.2", 2, 0, {}, "", {}, {}, "", {}, ""};
  FakeClock clock;
};

TEST_F(RoomTest, AStatusAnswerShowsEachRanksStateProgressAgeAndLastLine) {
  FakeView view(1);
  view.ranks[1].exit = ExitInfo::exited(3);
  view.ranks[1].end_time = 995;
  StatusRoom room(view, config, self, clock);
  const auto node = room.answer({});
  ASSERT_TRUE(node);
  EXPECT_EQ(node->node_rank, 1);
  EXPECT_EQ(node->host, "b");
  EXPECT_EQ(node->state, "running");
  EXPECT_EQ(node->round, 1);
  EXPECT_FALSE(node->job) << "only node 0 speaks for the job";
  ASSERT_EQ(node->ranks.size(), 2u);
  EXPECT_EQ(node->ranks[0].rank, 4);
  EXPECT_EQ(node->ranks[0].state, "running");
  ASSERT_TRUE(node->ranks[0].since_progress_s);
  EXPECT_DOUBLE_EQ(*node->ranks[0].since_progress_s, 4.0);
  EXPECT_DOUBLE_EQ(node->ranks[0].run_s, 10.0);
  EXPECT_EQ(node->ranks[0].last_line, "epoch 0");
  EXPECT_EQ(node->ranks[1].state, "failed");
  EXPECT_EQ(node->ranks[1].exit, "exit code 3");
  EXPECT_FALSE(node->ranks[1].since_progress_s) << "an ended rank has no progress age";
  EXPECT_DOUBLE_EQ(node->ranks[1].run_s, 5.0);
}

TEST_F(RoomTest, ARequestsFiltersLeaveOutRanksAndNodesButNode0AlwaysAnswers) {
  FakeView one(1);
  StatusRoom room(one, config, self, clock);
  StatusRequest rank_5;
  rank_5.ranks = std::set<int>{5};
  ASSERT_EQ(room.answer(rank_5)->ranks.size(), 1u);
  EXPECT_EQ(room.answer(rank_5)->ranks[0].rank, 5);
  StatusRequest node_0_only;
  node_0_only.nodes = std::set<int>{0};
  EXPECT_FALSE(room.answer(node_0_only));
  EXPECT_EQ(room.answer_text(encode_status_request(node_0_only)), "");
  EXPECT_EQ(room.answer_text("not a request"), "") << "a forged request is not answered";

  FakeView zero(0);
  StatusRoom node_0(zero, config, self, clock);
  StatusRequest node_1_only;
  node_1_only.nodes = std::set<int>{1};
  const auto answer = node_0.answer(node_1_only);
  ASSERT_TRUE(answer) << "node 0 alone knows the job's size";
  EXPECT_TRUE(answer->ranks.empty());
  ASSERT_TRUE(answer->job);
  EXPECT_EQ(answer->job->nnodes, 2);
  EXPECT_EQ(answer->job->restarts, 1);
  EXPECT_DOUBLE_EQ(answer->job->elapsed_s, 100.0);
}

TEST_F(RoomTest, Node0ListsTheNodesVerdictsSaidWereLostWithTheirHosts) {
  FakeView zero(0);
  StatusRoom room(zero, config, self, clock);
  JobVerdict lost{k_exit_node_lost, "node 1 lost", std::nullopt, -1};
  lost.lost = 1;
  room.on_verdict(lost);
  room.on_verdict(JobVerdict{1, "rank 4 failed", std::nullopt, 0});
  const auto job = room.answer({})->job;
  ASSERT_TRUE(job);
  ASSERT_EQ(job->lost_nodes.size(), 1u);
  EXPECT_EQ(job->lost_nodes[0].node_rank, 1);
  EXPECT_EQ(job->lost_nodes[0].host, "b");
  EXPECT_EQ(job->lost_nodes[0].addr, "10.0.0.2");
  EXPECT_EQ(job->lost_nodes[0].round, 1);
}

TEST_F(RoomTest, EachRanksGpuMemoryIsTheSumOverItsProcesses) {
  FakeView view(1);
  StatusRoom room(view, config, self, clock);
  int reads = 0;
  room.set_gpu_memory([&reads]() {
    ++reads;
    return std::optional<std::unordered_map<pid_t, unsigned long long>>(
        std::unordered_map<pid_t, unsigned long long>{{::getpid(), 1000}, {1, 5}});
  });
  const auto node = room.answer({});
  EXPECT_EQ(reads, 1) << "one NVML read a request";
  ASSERT_EQ(node->ranks.size(), 2u);
  EXPECT_EQ(node->ranks[0].gpu_memory_bytes, 1000u);
}

std::vector<json> read_events(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    out.push_back(json::parse(line));
  }
  return out;
}

struct NoConsole : ConsoleSink {
  bool write(int, std::string_view) override { return true; }
};

TEST_F(RoomTest, EventsCarryTheRoundsFactsAndOnlyNode0WritesTheJobsOwn) {
  ScratchDir dir;
  NoConsole console;
  for (const int node_rank : {0, 1}) {
    const std::string path = dir / ("e" + std::to_string(node_rank) + ".jsonl");
    {
      EventLog log(path, console, "b");
      FakeView view(node_rank);
      JobEvents events(log, view, config, 2, clock);
      events.on_agent_start();
      events.on_round_start();
      view.ranks[0].end_time = 992.5;
      events.on_rank_exit(0, ExitInfo::signaled(SIGKILL));
      JobVerdict v{137, "rank 4 was killed", std::nullopt, node_rank};
      v.lost = 1;
      events.on_verdict(v);
      events.on_restart("restart", 0);
    }
    std::vector<std::string> names;
    for (const json& e : read_events(path)) {
      names.push_back(e.at("event"));
      EXPECT_EQ(e.at("node"), node_rank);
      if (e.at("event") == "rank_exit") {
        EXPECT_EQ(e.at("rank"), 4);
        EXPECT_EQ(e.at("signal"), "SIGKILL");
        EXPECT_DOUBLE_EQ(e.at("seconds").get<double>(), 2.5);
      }
      if (e.at("event") == "round_start") {
        EXPECT_EQ(e.at("first_rank"), 4);
        EXPECT_EQ(e.at("local_ranks"), 2);
      }
    }
    const std::vector<std::string> own = {"agent_start", "round_start", "rank_start", "rank_start",
                                          "rank_exit"};
    std::vector<std::string> expected = own;
    if (node_rank == 0) {
      expected.insert(expected.end(), {"verdict", "node_lost", "restart"});
    }
    EXPECT_EQ(names, expected) << "node " << node_rank;
  }
}

struct NoSpawner : Spawner {
  int debuggers = 0;
  std::vector<pid_t> spawn(const std::vector<WorkerSpec>&) override { return {}; }
  void signal(int, int) override {}
  void kill_all() override {}
};

TEST_F(RoomTest, StacksOfRanksThatEndedAreAnsweredAtOnceWithoutADebugger) {
  FakeView view(1);
  view.ranks[0].exit = ExitInfo::exited(0);
  view.ranks[1].exit = ExitInfo::exited(1);
  NoSpawner spawner;
  StacksRoom room(view, config, self, spawner, clock);
  std::vector<std::string> replies;
  StatusRequest request;
  request.ranks = std::set<int>{5};
  room.answer(encode_status_request(request), [&](const std::string& r) { replies.push_back(r); });
  ASSERT_EQ(replies.size(), 1u);
  const json record = json::parse(replies[0]);
  EXPECT_EQ(record.at("node_rank"), 1);
  EXPECT_FALSE(record.contains("job"));
  ASSERT_EQ(record.at("ranks").size(), 1u);
  EXPECT_EQ(record.at("ranks")[0].at("rank"), 5);
  EXPECT_FALSE(room.deadline()) << "no debugger runs";

  StatusRequest elsewhere;
  elsewhere.nodes = std::set<int>{0};
  room.answer(encode_status_request(elsewhere),
              [&](const std::string& r) { replies.push_back(r); });
  EXPECT_EQ(replies.size(), 1u) << "a node the filter leaves out (not node 0) does not answer";
}

// Every node's stacks answer waits in node 0's store until the command
// reads it: however many nodes are asked, their answers together stay far
// below the store's bound (a store that refuses an agent's write fails its
// connection, and the job with it); a small job's nodes keep the whole.
TEST(StackCapture, TheNodesAskedShareABoundedPartOfNodeZerosStore) {
  EXPECT_EQ(StackCapture::bytes_for_node(1), StackCapture::k_bytes_per_node);
  EXPECT_EQ(StackCapture::bytes_for_node(0), StackCapture::k_bytes_per_node);
  EXPECT_EQ(StackCapture::bytes_for_node(128), StackCapture::k_bytes_per_node);
  for (const size_t nodes : {182, 1024, 4096, 16384, 131072}) {
    EXPECT_LE(nodes * StackCapture::bytes_for_node(nodes), StackCapture::k_bytes_per_job) << nodes;
  }
  EXPECT_LE(StackCapture::k_bytes_per_job, protocol::k_max_store_bytes / 3);
}

// A PMIx server that gives every round its variables, or refuses.
struct FakeServer : MpiHost {
  int rounds = 0;
  bool refuse = false;
  MpiRoundEnv start_round(const PmixJob& job) override {
    ++rounds;
    if (refuse) {
      throw std::runtime_error("no");
    }
    return MpiRoundEnv{{{"PMIX_NAMESPACE", job.nspace}}, "PMIX_RANK"};
  }
  std::vector<MpiEvent> handle_upcalls() override { return {}; }
};

Topology one_node(int nproc) {
  Topology t;
  t.nodes = {NodeEntry{0, "a", "10.0.0.1", nproc, 0, {}}};
  assign_ranks(t);
  return t;
}

TEST_F(RoomTest, AnMpiRoundStartsWithoutAnOuterStepsProcessManagementAndWithOpenMpisDefaults) {
  FakeServer server;
  MpiRanks ranks(server);
  const EnvMap env{{"PATH", "/bin"}, {"PMI_RANK", "3"}, {"SLURM_PMIXP_ABORT_AGENT_PORT", "1"}};
  int probes = 0;
  self.probe_cma = [&probes] {
    ++probes;
    return CmaProbe{false, "Yama forbids it"};
  };
  self.usable_cpus = 1;
  MpiRound round(ranks, env, self);
  const Topology t = one_node(2);
  for (int r = 0; r < 2; ++r) {
    const auto plan = round.start(t, layout_of(t, 0, "job", "default", 0));
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->worker_env.find("PMI_RANK"), plan->worker_env.end());
    EXPECT_EQ(plan->worker_env.find("SLURM_PMIXP_ABORT_AGENT_PORT"), plan->worker_env.end());
    EXPECT_EQ(plan->worker_env.at("PATH"), "/bin");
    EXPECT_EQ(plan->rank_variable, "PMIX_RANK");
    EXPECT_EQ(plan->shared.front().first, "PMIX_NAMESPACE");
    EXPECT_GT(plan->shared.size(), 1u) << "Open MPI's defaults follow the server's variables";
  }
  EXPECT_EQ(probes, 1) << "CMA is probed once, at the first round";
  EXPECT_FALSE(round.host().cma);
  EXPECT_EQ(round.host().cma_why, "Yama forbids it");
  EXPECT_TRUE(round.host().oversubscribed) << "two ranks on one usable CPU";
}

TEST_F(RoomTest, AServerThatRefusedTheJobIsNotAskedAgainAndEndsCountAsTheyAre) {
  FakeServer server;
  server.refuse = true;
  MpiRanks ranks(server);
  const EnvMap env{{"PATH", "/bin"}};
  MpiRound round(ranks, env, self);
  const Topology t = one_node(1);
  EXPECT_FALSE(round.start(t, layout_of(t, 0, "job", "default", 0)));
  EXPECT_FALSE(round.start(t, layout_of(t, 0, "job", "default", 0)));
  EXPECT_EQ(server.rounds, 1);
  EXPECT_EQ(round.exit(0, ExitInfo::exited(0), false), ExitInfo::exited(0))
      << "no server: a clean exit is a clean exit";
  EXPECT_FALSE(round.error(0, 0));
}

}  // namespace
}  // namespace ddplaunch
