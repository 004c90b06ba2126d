// The Agent's logic against fakes of the spawner, the clock, the job link and
// the console (ninja's FakeCommandRunner idea): no process, socket or timer.
#include <gtest/gtest.h>

#include <csignal>

#include "agent/agent.hpp"
#include "agent/status_room.hpp"
#include "ddplaunch/error.hpp"
#include "proc/spawn.hpp"

namespace ddplaunch {
namespace {

using namespace std::chrono_literals;
using Stream = OutputRouter::Stream;

struct FakeSpawner : Spawner {
  std::vector<std::vector<WorkerSpec>> spawned;
  std::vector<std::pair<int, int>> signals;  // (local rank, signal)
  int kill_alls = 0;
  std::optional<std::string> fail_with;
  std::vector<pid_t> spawn(const std::vector<WorkerSpec>& workers) override {
    if (fail_with) {
      throw SpawnError(*fail_with);
    }
    spawned.push_back(workers);
    std::vector<pid_t> pids;
    for (size_t i = 0; i < workers.size(); ++i) {
      pids.push_back(static_cast<pid_t>(100 + i));
    }
    return pids;
  }
  void signal(int local_rank, int sig) override { signals.emplace_back(local_rank, sig); }
  void kill_all() override { ++kill_alls; }
  bool debugger = false;  // dump_stacks() finds one
  std::vector<int> dumps;
  bool dump_stacks(int local_rank) override {
    dumps.push_back(local_rank);
    return debugger;
  }
  int count(int sig) const {
    return static_cast<int>(std::count_if(signals.begin(), signals.end(),
                                          [sig](const auto& s) { return s.second == sig; }));
  }
  std::vector<pid_t> leftovers;  // what reclaim() finds still alive
  int reclaims = 0;
  std::vector<pid_t> reclaim(std::chrono::milliseconds, int& killed) override {
    ++reclaims;
    killed = static_cast<int>(leftovers.size());
    return leftovers;
  }
};

struct AgentClock : Clock {
  TimePoint t{std::chrono::seconds(1000)};
  TimePoint now() const override { return t; }
  double wall_now() const override {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  }
};

struct FakeLink : JobLink {
  std::optional<JoinRecord> joined;
  std::vector<JobVerdict> published;
  int successes = 0;
  std::optional<std::vector<RankOutcome>> finished;
  std::vector<std::vector<RankOutcome>> rounds;  // what each next_round() reported
  std::vector<int> restarts;                     // and the restarts it said were used
  std::vector<int> next_rounds;                  // and the round it numbered next
  void join(const JoinRecord& self) override { joined = self; }
  void publish_stop(const JobVerdict& v) override { published.push_back(v); }
  void publish_success() override { ++successes; }
  void finish(const std::vector<RankOutcome>& local) override { finished = local; }
  void next_round(const std::vector<RankOutcome>& local, const RoundStart& next) override {
    rounds.push_back(local);
    restarts.push_back(next.restarts);
    next_rounds.push_back(next.round);
  }
};

struct FakeConsole : ConsoleSink {
  std::string out, err;
  bool write(int fd, std::string_view data) override {
    (fd == 1 ? out : err).append(data);
    return true;
  }
};

Topology two_nodes(int nproc) {
  Topology t;
  t.master_addr = "10.0.0.1";
  t.master_port = 1234;
  t.nodes = {NodeEntry{0, "a", "10.0.0.1", nproc, 0, {}},
             NodeEntry{1, "b", "10.0.0.2", nproc, 0, {}}};
  assign_ranks(t);
  return t;
}

// The PMIx server as the Agent sees it: each round's namespace, and what the
// workers told it (queued by the test).
struct FakeMpi : MpiHost {
  std::vector<PmixJob> rounds;
  std::vector<MpiEvent> queued;
  MpiRoundEnv start_round(const PmixJob& job) override {
    rounds.push_back(job);
    return MpiRoundEnv{{{"PMIX_NAMESPACE", job.nspace}}, "PMIX_RANK"};
  }
  std::vector<MpiEvent> handle_upcalls() override { return std::exchange(queued, {}); }
  void tell(MpiEvent::Kind kind, int rank, int status = 0, std::string message = "") {
    queued.push_back(MpiEvent{kind, rank, status, std::move(message)});
  }
};

class AgentTest : public ::testing::Test {
 protected:
  Config config;
  EnvMap env{{"PATH", "/bin"}};
  FakeSpawner spawner;
  AgentClock clock;
  FakeLink link;
  FakeConsole console;
  MpiHost* mpi = nullptr;
  std::unique_ptr<MpiRanks> mpi_ranks;  // the MPI room over `mpi`, when set
  std::unique_ptr<Agent> agent;

  void make(int nproc, bool multi_node) {
    config.program = "train";
    config.nproc_per_node = nproc;
    config.term_timeout_s = 30;
    if (multi_node) {
      config.nnodes = 2;
    }
    mpi_ranks = mpi != nullptr ? std::make_unique<MpiRanks>(*mpi) : nullptr;
    agent = std::make_unique<Agent>(
        config, env, NodeIdentity{"b", "10.0.0.2", nproc, 4321, {}, "", {}, {}, "", {}, ""},
        spawner, clock, multi_node ? &link : nullptr, console, mpi_ranks.get());
    agent->start();
  }
  // Worker `lr` ends: its pipes close, then it is reaped.
  void ends(int lr, ExitInfo info) {
    agent->on_output_closed(lr, Stream::k_out);
    agent->on_output_closed(lr, Stream::k_err);
    agent->on_worker_exit(lr, info);
  }
  void pass(std::chrono::milliseconds d) {
    clock.t += d;
    agent->on_time();
  }
};

TEST_F(AgentTest, OneNodeRunsItsWorkersToSuccess) {
  make(3, false);
  ASSERT_EQ(spawner.spawned.size(), 1u);
  EXPECT_EQ(spawner.spawned[0].size(), 3u);
  EXPECT_EQ(spawner.spawned[0][2].env.at("RANK"), "2");
  EXPECT_EQ(spawner.spawned[0][2].env.at("MASTER_PORT"), "4321");
  agent->router().on_data(1, Stream::k_out, "hello\npart");
  for (int lr = 0; lr < 3; ++lr) {
    EXPECT_FALSE(agent->done());
    ends(lr, ExitInfo::exited(0));
  }
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 0);
  EXPECT_EQ(agent->summary().ranks.size(), 3u);
  EXPECT_EQ(console.out, "[rank 1]: hello\n[rank 1]: part\n");
  EXPECT_EQ(spawner.kill_alls, 1) << "strays are swept once the workers are gone";
  EXPECT_TRUE(spawner.signals.empty());
}

// `ddplaunch status`' last line and its age come from the router, on the
// Agent's clock, through the Agent's view: a test moves the time and reads
// the age it moved.
TEST_F(AgentTest, AStatusAnswerTellsEachRanksLastLineAndItsAgeOnTheAgentsClock) {
  make(2, false);
  const NodeIdentity self{"b", "10.0.0.2", 2, 4321, {}, "", {}, {}, "", {}, ""};
  const StatusRoom room(*agent, config, self, clock);
  agent->router().on_data(1, Stream::k_out, "epoch 1\nepoch 2 loss 0.5\n");
  pass(std::chrono::milliseconds(4500));
  const auto node = room.answer({});
  ASSERT_TRUE(node);
  ASSERT_EQ(node->ranks.size(), 2u);
  EXPECT_EQ(node->ranks[1].last_line, "epoch 2 loss 0.5");
  EXPECT_EQ(node->ranks[1].progress_events, 2);
  ASSERT_TRUE(node->ranks[1].since_progress_s);
  EXPECT_DOUBLE_EQ(*node->ranks[1].since_progress_s, 4.5);
  StatusRequest only_rank_0;
  only_rank_0.ranks = std::set<int>{0};
  EXPECT_EQ(room.answer(only_rank_0)->ranks.size(), 1u);
}

// The rooms hear the round's events from the Agent in the order they
// happen, each after the state it reads is set.
struct Recorder : RoundObserver {
  const Agent* agent = nullptr;
  std::vector<std::string> heard;
  void on_agent_start() override { heard.push_back("start"); }
  void on_rendezvous_start() override { heard.push_back("rendezvous"); }
  void on_joined(const Topology&, int node_rank, const RoundStart&) override {
    heard.push_back("joined " + std::to_string(node_rank));
  }
  void on_round_start() override {
    heard.push_back("round " + std::to_string(agent->round().round) + " " +
                    std::string(agent->round().state) + " pids " +
                    std::to_string(agent->pids().size()));
  }
  void on_rank_exit(int local_rank, const ExitInfo&) override {
    heard.push_back("exit " + std::to_string(agent->rank(static_cast<size_t>(local_rank)).rank));
  }
  void on_verdict(const JobVerdict& v) override {
    heard.push_back("verdict " + std::to_string(v.exit_code));
  }
  void on_round_end(const Decision&, std::string_view next) override {
    heard.push_back("end " + std::string(next));
  }
  void on_restart(std::string_view kind, int) override {
    heard.push_back(std::string(kind) + " " + std::to_string(agent->round().restarts));
  }
  void on_job_end(const JobSummary& s) override {
    heard.push_back("job " + std::to_string(s.exit_code));
  }
};

TEST_F(AgentTest, TheRoomsHearTheRoundInOrder) {
  config.nnodes = 2;
  config.program = "train";
  config.nproc_per_node = 1;
  config.max_restarts = 1;
  Recorder recorder;
  agent = std::make_unique<Agent>(
      config, env, NodeIdentity{"b", "10.0.0.2", 1, 4321, {}, "", {}, {}, "", {}, ""}, spawner,
      clock, &link, console);
  recorder.agent = agent.get();
  agent->observe(recorder);
  agent->start();
  agent->on_joined(two_nodes(1), 1, RoundStart{});
  ends(0, ExitInfo::exited(5));
  agent->on_verdict(link.published.at(0));
  EXPECT_EQ(recorder.heard, (std::vector<std::string>{
                                "start", "rendezvous", "joined 1", "round 0 running pids 1",
                                "exit 1", "verdict 5", "end restart", "restart 1", "rendezvous"}));
}

TEST_F(AgentTest, FirstFailureIsTheRootCauseWithItsLastStderrLines) {
  make(3, false);
  agent->router().on_data(1, Stream::k_err, "Traceback\nValueError: boom\n");
  ends(1, ExitInfo::exited(7));
  EXPECT_EQ(spawner.count(SIGTERM), 2);
  ends(0, ExitInfo::signaled(SIGTERM));
  ends(2, ExitInfo::signaled(SIGTERM));
  ASSERT_TRUE(agent->done());
  const auto& s = agent->summary();
  EXPECT_EQ(s.exit_code, 7);
  EXPECT_EQ(s.reason, StopReason::k_worker_failed);
  ASSERT_TRUE(s.root_cause);
  EXPECT_EQ(s.root_cause->rank, 1);
  EXPECT_EQ(s.root_cause->last_stderr, (std::vector<std::string>{"Traceback", "ValueError: boom"}));
}

TEST_F(AgentTest, EachWorkerGetsItsPmixServersVariablesAndOpenMpisDefaults) {
  FakeMpi fake;
  mpi = &fake;
  env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "cma";  // the user's own wins
  env["PMI_RANK"] = "5";                                    // an outer step's: removed
  make(2, false);
  ASSERT_EQ(fake.rounds.size(), 1u);
  EXPECT_EQ(fake.rounds[0].nspace, "ddplaunch.none.0.0");
  const auto& w = spawner.spawned.at(0).at(1).env;
  EXPECT_EQ(w.at("PMIX_RANK"), "1");
  EXPECT_EQ(w.at("OMPI_MCA_schizo"), "ompi");
  EXPECT_EQ(w.at("OMPI_MCA_btl_vader_single_copy_mechanism"), "cma");
  EXPECT_FALSE(w.contains("PMI_RANK"));
}

TEST_F(AgentTest, MpiAbortsCodeIsTheVerdictAndTheReportSaysSo) {
  FakeMpi fake;
  mpi = &fake;
  make(2, false);
  fake.tell(MpiEvent::Kind::k_connected, 0);
  fake.tell(MpiEvent::Kind::k_connected, 1);
  fake.tell(MpiEvent::Kind::k_aborted, 1, 7, "bad input");
  ends(1, ExitInfo::exited(7));
  ends(0, ExitInfo::signaled(SIGTERM));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 7);
  ASSERT_TRUE(agent->summary().root_cause && agent->summary().root_cause->error);
  EXPECT_EQ(agent->summary().root_cause->error->message, "MPI_Abort with error code 7: bad input");
}

TEST_F(AgentTest, MpiAbortWithZeroStillFailsAndARankSkippingFinalizeFails) {
  FakeMpi fake;
  mpi = &fake;
  make(2, false);
  fake.tell(MpiEvent::Kind::k_aborted, 0, 0);
  ends(0, ExitInfo::exited(0));
  ends(1, ExitInfo::signaled(SIGTERM));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 1);

  spawner = FakeSpawner{};
  make(2, false);
  fake.tell(MpiEvent::Kind::k_connected, 0);
  fake.tell(MpiEvent::Kind::k_connected, 1);
  fake.tell(MpiEvent::Kind::k_finalized, 1);
  ends(1, ExitInfo::exited(0));  // finalized: fine
  EXPECT_EQ(spawner.count(SIGTERM), 0);
  ends(0, ExitInfo::exited(0));  // never finalized
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 1);
  ASSERT_TRUE(agent->summary().root_cause && agent->summary().root_cause->error);
  EXPECT_NE(agent->summary().root_cause->error->message.find("without calling MPI_Finalize"),
            std::string::npos);
}

TEST_F(AgentTest, AProgramThatNeverCallsMpiInitIsUntouched) {
  FakeMpi fake;
  mpi = &fake;
  make(2, false);
  ends(0, ExitInfo::exited(0));
  ends(1, ExitInfo::exited(0));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 0);
}

TEST_F(AgentTest, GracePeriodThenSigkill) {
  make(2, false);
  ends(0, ExitInfo::exited(3));
  ASSERT_EQ(agent->next_deadline(), clock.t + 30s);
  pass(29s);
  EXPECT_EQ(spawner.count(SIGKILL), 0);
  pass(1s);
  EXPECT_EQ(spawner.count(SIGKILL), 1);
  ends(1, ExitInfo::signaled(SIGKILL));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 3);
}

TEST_F(AgentTest, OutputThatNeverClosesIsDrainedForABoundedTime) {
  make(1, false);
  agent->on_worker_exit(0, ExitInfo::exited(0));  // a grandchild keeps the pipes open
  EXPECT_FALSE(agent->done());
  pass(k_drain_timeout);
  EXPECT_TRUE(agent->done());
}

TEST_F(AgentTest, SecondSignalKillsAtOnce) {
  make(2, false);
  agent->on_signal(SIGINT);
  EXPECT_EQ(spawner.count(SIGINT), 2);
  agent->on_signal(SIGINT);
  EXPECT_EQ(spawner.count(SIGKILL), 2);
  ends(0, ExitInfo::signaled(SIGKILL));
  ends(1, ExitInfo::signaled(SIGKILL));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 130);
  EXPECT_EQ(agent->summary().reason, StopReason::k_signal);
}

TEST_F(AgentTest, UserSignalsAreForwardedAndTheJobGoesOn) {
  make(2, false);
  agent->on_signal(SIGUSR1);
  EXPECT_EQ(spawner.count(SIGUSR1), 2);
  ends(0, ExitInfo::exited(0));
  ends(1, ExitInfo::exited(0));
  EXPECT_EQ(agent->summary().exit_code, 0);
}

// Slurm's slurmstepd signals every process of the step, the workers too: a
// second copy from ddplaunch would run a rank's handler twice.
TEST_F(AgentTest, ASignalSlurmSentToTheWorkersToIsNotSentAgain) {
  make(2, false);
  agent->on_signal(SIGUSR1, Agent::SignalFrom::k_slurm);
  EXPECT_EQ(spawner.count(SIGUSR1), 0);
  ends(0, ExitInfo::exited(0));
  ends(1, ExitInfo::exited(0));
  EXPECT_EQ(agent->summary().exit_code, 0);
}

TEST_F(AgentTest, APreemptionSlurmSentToTheWorkersIsNotSentAgainButItsGraceHolds) {
  config.preempt_signal = SIGUSR1;
  make(2, false);
  agent->on_signal(SIGUSR1, Agent::SignalFrom::k_slurm);
  EXPECT_EQ(spawner.count(SIGUSR1), 0);
  ends(0, ExitInfo::exited(0));  // checkpointed on Slurm's own signal
  pass(30s);                     // --term-timeout
  EXPECT_EQ(spawner.signals, (std::vector<std::pair<int, int>>{{1, SIGKILL}}));
  ends(1, ExitInfo::signaled(SIGKILL));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, k_exit_preempted);
}

TEST_F(AgentTest, SpawnErrorIsAnErrorOfItsOwn) {
  spawner.fail_with = "cannot execute 'train': not found";
  make(2, false);
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 127);
  EXPECT_EQ(agent->error(), "cannot execute 'train': not found");
}

// --- several nodes ---------------------------------------------------------------

TEST_F(AgentTest, JoinsThenRunsWithTheTopologyItWasGiven) {
  make(2, true);
  ASSERT_TRUE(link.joined);
  EXPECT_EQ(link.joined->nproc, 2);
  EXPECT_EQ(link.joined->node_rank, -1);
  EXPECT_TRUE(spawner.spawned.empty()) << "nothing starts before rendezvous";
  agent->on_joined(two_nodes(2), 1, {});
  ASSERT_EQ(spawner.spawned.size(), 1u);
  EXPECT_EQ(spawner.spawned[0][1].env.at("RANK"), "3");
  EXPECT_EQ(spawner.spawned[0][1].env.at("WORLD_SIZE"), "4");
  ends(0, ExitInfo::exited(0));
  ends(1, ExitInfo::exited(0));
  EXPECT_EQ(link.successes, 1);
  EXPECT_FALSE(agent->done()) << "waits for the other node";
  JobVerdict success;
  success.node = 0;
  agent->on_verdict(success);
  ASSERT_TRUE(link.finished);
  EXPECT_EQ(link.finished->size(), 2u);
  EXPECT_FALSE(agent->done()) << "gathers results";
  std::vector<RankOutcome> all(4);
  agent->on_finished(all);
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 0);
  EXPECT_EQ(agent->summary().ranks.size(), 4u);
  ASSERT_TRUE(agent->summary().topology);
  EXPECT_EQ(agent->summary().topology->nodes.size(), 2u);
}

TEST_F(AgentTest, RemoteVerdictStopsTheWorkersAndDecidesTheExitCode) {
  make(2, true);
  agent->on_joined(two_nodes(2), 1, {});
  RankOutcome root;
  root.rank = 0;
  root.exit = ExitInfo::exited(9);
  agent->on_verdict(JobVerdict{9, "", root, 0});
  EXPECT_EQ(spawner.count(SIGTERM), 2);
  ends(0, ExitInfo::signaled(SIGTERM));
  ends(1, ExitInfo::signaled(SIGTERM));
  agent->on_finished({});
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 9);
  EXPECT_EQ(agent->summary().reason, StopReason::k_remote);
  EXPECT_EQ(agent->summary().root_cause->rank, 0);
}

TEST_F(AgentTest, LocalFailureIsPublishedWithItsRootCause) {
  make(2, true);
  agent->on_joined(two_nodes(2), 1, {});
  agent->router().on_data(0, Stream::k_err, "boom\n");
  ends(0, ExitInfo::exited(5));
  ASSERT_EQ(link.published.size(), 1u);
  EXPECT_EQ(link.published[0].exit_code, 5);
  EXPECT_EQ(link.published[0].node, 1);
  ASSERT_TRUE(link.published[0].root_cause);
  EXPECT_EQ(link.published[0].root_cause->rank, 2);
  EXPECT_EQ(link.published[0].root_cause->last_stderr, std::vector<std::string>{"boom"});
  agent->on_verdict(link.published[0]);
  ends(1, ExitInfo::signaled(SIGTERM));
  agent->on_finished({});
  EXPECT_EQ(agent->summary().exit_code, 5);
  EXPECT_EQ(agent->summary().reason, StopReason::k_worker_failed);
}

TEST_F(AgentTest, SignalWhileJoiningStopsTheJobOnEveryNode) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    SCOPED_TRACE(sig);
    link = FakeLink();
    make(2, true);
    agent->on_signal(sig);
    ASSERT_EQ(link.published.size(), 1u);
    EXPECT_EQ(link.published[0].exit_code, 128 + sig);
    EXPECT_FALSE(agent->done()) << "waits for the store to confirm";
    agent->on_verdict(link.published[0]);
    ASSERT_TRUE(agent->done());
    EXPECT_EQ(agent->summary().exit_code, 128 + sig);
    EXPECT_EQ(agent->summary().reason, StopReason::k_signal);
    EXPECT_TRUE(spawner.spawned.empty());
  }
}

TEST_F(AgentTest, SignalWhileJoiningWithAStalledStoreEndsAfterTheConfirmationWait) {
  make(2, true);
  agent->on_signal(SIGTERM);
  EXPECT_EQ(agent->next_deadline(), clock.t + k_publish_wait);
  pass(k_publish_wait);
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 143);
}

TEST_F(AgentTest, NoWorkerStartsWhenRendezvousCompletesAfterAStopSignal) {
  make(2, true);
  agent->on_signal(SIGINT);
  agent->on_joined(two_nodes(2), 1, {});
  EXPECT_TRUE(spawner.spawned.empty());
  agent->on_verdict(link.published.at(0));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 130);
}

TEST_F(AgentTest, SecondSignalWhileJoiningLeavesAtOnce) {
  make(2, true);
  agent->on_signal(SIGINT);
  agent->on_signal(SIGINT);
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 130);
}

TEST_F(AgentTest, AnotherNodesStopWhileJoiningEndsThisOne) {
  make(2, true);
  agent->on_verdict(JobVerdict{130, "node 0 (a) received SIGINT", std::nullopt, 0});
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 130);
  EXPECT_EQ(agent->summary().message, "node 0 (a) received SIGINT");
  EXPECT_FALSE(agent->error());
}

TEST_F(AgentTest, RendezvousFailureIsAnError) {
  make(2, true);
  agent->on_join_failed(3, "rendezvous timed out");
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->error(), "rendezvous timed out");
  EXPECT_EQ(agent->summary().exit_code, 3);
}

TEST_F(AgentTest, StalledLinkDelaysNeitherOutputNorTheEnd) {
  make(2, true);
  agent->on_joined(two_nodes(2), 0, {});
  agent->on_signal(SIGINT);
  ASSERT_EQ(link.published.size(), 1u);
  // The store never answers; output and exits are still handled at once.
  agent->router().on_data(0, Stream::k_out, "still here\n");
  EXPECT_EQ(console.out, "[rank 0]: still here\n");
  ends(0, ExitInfo::signaled(SIGINT));
  ends(1, ExitInfo::signaled(SIGINT));
  EXPECT_FALSE(agent->done());
  pass(k_publish_wait);
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 130);
  EXPECT_TRUE(link.finished) << "its results are still sent";
}

TEST_F(AgentTest, SignalWhileGatheringEndsAtOnceKeepingTheVerdict) {
  make(1, true);
  agent->on_joined(two_nodes(1), 0, {});
  ends(0, ExitInfo::exited(7));
  agent->on_verdict(link.published.at(0));
  ASSERT_TRUE(link.finished);
  EXPECT_FALSE(agent->done());
  agent->on_signal(SIGINT);
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 130);
  EXPECT_EQ(agent->summary().root_cause->rank, 0);
  EXPECT_NE(agent->summary().message.find("received SIGINT while the job was ending"),
            std::string::npos);
}

TEST_F(AgentTest, SignalDuringAnotherNodesTeardownKillsNowAndExits128PlusN) {
  make(1, true);
  agent->on_joined(two_nodes(1), 1, {});
  agent->on_verdict(JobVerdict{4, "node 0 lost", std::nullopt, 0});
  EXPECT_EQ(spawner.count(SIGTERM), 1);
  agent->on_signal(SIGTERM);
  EXPECT_EQ(spawner.count(SIGKILL), 1);
  ends(0, ExitInfo::signaled(SIGKILL));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 143);
}

TEST_F(AgentTest, SpawnErrorIsPublishedToTheOtherNodes) {
  spawner.fail_with = "cannot execute 'train': not found";
  make(2, true);
  agent->on_joined(two_nodes(2), 1, {});
  ASSERT_EQ(link.published.size(), 1u);
  EXPECT_EQ(link.published[0].exit_code, 127);
  EXPECT_NE(link.published[0].message.find("node 1 (b): cannot execute"), std::string::npos);
  EXPECT_FALSE(agent->done());
  agent->on_verdict(link.published[0]);
  // No rank of this node ran: it reports that at once, so node 0 does not
  // wait for its results until the heartbeat timeout.
  ASSERT_TRUE(link.finished.has_value());
  EXPECT_TRUE(link.finished->empty());
  EXPECT_FALSE(agent->done());
  agent->on_finished({});
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 127);
  EXPECT_TRUE(agent->error());
}

// --- restarts (--max-restarts) -----------------------------------------------------

TEST_F(AgentTest, OneNodeRestartsEveryWorkerWithAFreshPortAndTheNextCount) {
  config.max_restarts = 2;
  make(2, false);
  ends(1, ExitInfo::exited(3));
  ends(0, ExitInfo::signaled(SIGTERM));
  ASSERT_FALSE(agent->done()) << "a restart remains";
  ASSERT_EQ(spawner.spawned.size(), 2u);
  EXPECT_EQ(spawner.spawned[1][0].env.at("TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(spawner.spawned[1][0].env.at("TORCHELASTIC_MAX_RESTARTS"), "2");
  // No pick_port in the fake identity: the same port again. (With one, a
  // fresh one: bench and integration tests.)
  ends(0, ExitInfo::exited(0));
  ends(1, ExitInfo::exited(0));
  ASSERT_TRUE(agent->done());
  const auto& s = agent->summary();
  EXPECT_EQ(s.exit_code, 0);
  ASSERT_EQ(s.rounds.size(), 2u);
  EXPECT_EQ(s.rounds[0].exit_code, 3);
  ASSERT_TRUE(s.rounds[0].root_cause);
  EXPECT_EQ(s.rounds[0].root_cause->rank, 1);
  EXPECT_EQ(s.rounds[1].exit_code, 0);
}

TEST_F(AgentTest, ANodeThatCannotGetCleanDoesNotStartTheNextRound) {
  config.max_restarts = 2;
  make(1, false);
  spawner.leftovers = {4242};  // the last round's, in uninterruptible sleep
  ends(0, ExitInfo::exited(3));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(spawner.reclaims, 1);
  EXPECT_EQ(spawner.spawned.size(), 1u) << "no worker starts beside the leftover";
  EXPECT_EQ(agent->summary().exit_code, 4);
  ASSERT_TRUE(agent->error());
  EXPECT_NE(agent->error()->find("pid 4242 of the last round is still alive"), std::string::npos)
      << *agent->error();
}

TEST_F(AgentTest, TheNextRoundWaitsForTheLastRoundsGpuMemory) {
  config.max_restarts = 2;
  config.restart_reclaim_timeout_s = 60;
  make(2, false);
  std::vector<pid_t> asked;
  std::chrono::milliseconds given{};
  agent->set_gpu_release_wait(
      [&](const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
        asked = pids;
        given = timeout;
        return std::optional<pid_t>();  // released
      });
  const std::vector<pid_t> workers = {100, 101};  // the fake spawner's
  ends(0, ExitInfo::exited(3));
  ends(1, ExitInfo::signaled(SIGTERM));
  ASSERT_FALSE(agent->done());
  EXPECT_EQ(asked, workers) << "the last round's workers are the ones waited for";
  EXPECT_GT(given, std::chrono::milliseconds(0));
  EXPECT_LE(given, std::chrono::milliseconds(60'000));
  EXPECT_EQ(spawner.spawned.size(), 2u) << "released: the next round starts";
}

TEST_F(AgentTest, GpuMemoryStillHeldKeepsTheNodeOutOfTheNextRound) {
  config.max_restarts = 2;
  make(1, false);
  agent->set_gpu_release_wait([](const std::vector<pid_t>&, std::chrono::milliseconds) {
    return std::optional<pid_t>(777);
  });
  ends(0, ExitInfo::exited(3));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(spawner.spawned.size(), 1u) << "no worker starts beside the held GPU memory";
  EXPECT_EQ(agent->summary().exit_code, 4);
  ASSERT_TRUE(agent->error());
  EXPECT_NE(agent->error()->find("pid 777 of the last round still holds GPU memory"),
            std::string::npos)
      << *agent->error();
}

TEST_F(AgentTest, RestartsExhaustedEndWithTheLastRootCause) {
  config.max_restarts = 1;
  make(1, false);
  ends(0, ExitInfo::exited(3));
  ASSERT_FALSE(agent->done());
  ends(0, ExitInfo::exited(4));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 4);
  EXPECT_EQ(agent->summary().rounds.size(), 2u);
  EXPECT_EQ(spawner.spawned.size(), 2u);
  EXPECT_NE(format_failure_report(agent->summary()).find("round 0 failed: rank 0"),
            std::string::npos);
}

TEST_F(AgentTest, AStopSignalIsNeverRestarted) {
  config.max_restarts = 3;
  make(1, false);
  agent->on_signal(SIGTERM);
  ends(0, ExitInfo::signaled(SIGTERM));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 143);
  EXPECT_EQ(spawner.spawned.size(), 1u);
}

TEST_F(AgentTest, AcrossNodesTheVerdictRestartsAndTheNodesMeetAgain) {
  config.max_restarts = 1;
  make(2, true);
  EXPECT_EQ(link.joined->max_restarts, 1) << "every node must agree";
  agent->on_joined(two_nodes(2), 1, {});
  RankOutcome root;
  root.rank = 0;
  root.exit = ExitInfo::exited(9);
  agent->on_verdict(JobVerdict{9, "", root, 0});  // node 0's rank failed
  ends(0, ExitInfo::signaled(SIGTERM));
  ends(1, ExitInfo::signaled(SIGTERM));
  ASSERT_EQ(link.rounds.size(), 1u) << "this node's workers ended: it meets the others";
  EXPECT_EQ(link.rounds[0].size(), 2u);
  EXPECT_FALSE(link.finished) << "no results yet: the job goes on";
  EXPECT_EQ(spawner.spawned.size(), 1u) << "not before the next round starts";
  Topology next = two_nodes(2);
  next.master_port = 5678;
  agent->on_joined(next, 1, RoundStart{1, link.restarts.at(0)});
  ASSERT_EQ(spawner.spawned.size(), 2u);
  EXPECT_EQ(spawner.spawned[1][0].env.at("TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(spawner.spawned[1][0].env.at("MASTER_PORT"), "5678");
  EXPECT_EQ(spawner.spawned[1][1].env.at("RANK"), "3");
}

TEST_F(AgentTest, AVerdictWithoutAFailingRankIsNeverRestarted) {
  config.max_restarts = 1;
  make(1, true);
  agent->on_joined(two_nodes(1), 1, {});
  agent->on_verdict(JobVerdict{4, "node 0 was lost", std::nullopt, 0});
  ends(0, ExitInfo::signaled(SIGTERM));
  EXPECT_TRUE(link.rounds.empty());
  EXPECT_TRUE(link.finished);
}

TEST_F(AgentTest, ASignalWhileTheJobRestartsStopsTheNextRoundEverywhere) {
  config.max_restarts = 1;
  make(1, true);
  agent->on_joined(two_nodes(1), 1, {});
  RankOutcome root;
  root.exit = ExitInfo::exited(9);
  agent->on_verdict(JobVerdict{9, "", root, 0});
  agent->on_worker_exit(0, ExitInfo::signaled(SIGTERM));  // its pipes are still open
  agent->on_signal(SIGINT);
  ASSERT_EQ(link.rounds.size(), 1u);
  ASSERT_EQ(link.published.size(), 1u);
  EXPECT_EQ(link.published[0].exit_code, 130);
  agent->on_verdict(link.published[0]);
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 130);
  EXPECT_EQ(spawner.spawned.size(), 1u);
}

TEST_F(AgentTest, ASignalWhoseStopLostTheRaceToARestartStillStopsTheNextRound) {
  // The signal comes first here, and this node publishes its stop; but the
  // store already holds another node's failure, which restarts the job, and
  // that is the verdict delivered. The signal must not be lost: this node
  // goes to the next round only to stop it on every node, as when the
  // signal comes after the verdict.
  config.max_restarts = 1;
  make(1, true);
  agent->on_joined(two_nodes(1), 1, {});
  agent->on_signal(SIGTERM);
  ASSERT_EQ(link.published.size(), 1u);
  EXPECT_EQ(link.published[0].exit_code, 143);
  RankOutcome root;
  root.rank = 0;
  root.exit = ExitInfo::exited(7);
  agent->on_verdict(JobVerdict{7, "", root, 0});  // node 0's rank failed first
  ends(0, ExitInfo::signaled(SIGTERM));
  ASSERT_EQ(link.rounds.size(), 1u) << "it meets the others in the next round";
  ASSERT_EQ(link.published.size(), 2u) << "and stops that round on every node";
  EXPECT_EQ(link.published[1].exit_code, 143);
  agent->on_verdict(link.published[1]);
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 143);
  EXPECT_EQ(spawner.spawned.size(), 1u) << "no worker of the next round starts";
}

TEST_F(AgentTest, AnElasticJobRegroupsForANewcomerWithoutUsingARestart) {
  config.max_restarts = 1;
  config.nnodes_min = 1;  // --nnodes 1:2
  make(1, true);
  EXPECT_EQ(link.joined->nnodes_min, 1) << "every node must agree";
  agent->on_joined(two_nodes(1), 1, {});
  agent->on_verdict(JobVerdict{0, "node 2 joined", std::nullopt, 0, -1, true});
  ends(0, ExitInfo::signaled(SIGTERM));
  ASSERT_EQ(link.rounds.size(), 1u) << "a regroup is a next round";
  EXPECT_EQ(link.restarts[0], 0) << "that uses no restart";
  EXPECT_FALSE(link.finished);
  agent->on_joined(two_nodes(1), 1, RoundStart{1, 0});
  ASSERT_EQ(spawner.spawned.size(), 2u);
  EXPECT_EQ(spawner.spawned[1][0].env.at("TORCHELASTIC_RESTART_COUNT"), "0");
  // Now a node is lost: the survivors go on, using the one restart.
  agent->on_verdict(JobVerdict{4, "node 0 was lost", std::nullopt, 0, 0});
  ends(0, ExitInfo::signaled(SIGTERM));
  ASSERT_EQ(link.rounds.size(), 2u);
  EXPECT_EQ(link.restarts[1], 1);
  agent->on_joined(two_nodes(1), 0, RoundStart{2, 1});
  ASSERT_EQ(spawner.spawned.size(), 3u);
  EXPECT_EQ(spawner.spawned[2][0].env.at("TORCHELASTIC_RESTART_COUNT"), "1");
  ends(0, ExitInfo::exited(0));
  agent->on_verdict(JobVerdict{});
  ASSERT_TRUE(link.finished);
  agent->on_finished(*link.finished);
  ASSERT_TRUE(agent->done());
  const auto& s = agent->summary();
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_EQ(s.restarts, 1);
  ASSERT_EQ(s.rounds.size(), 3u);
  EXPECT_TRUE(s.rounds[0].regroup);
  EXPECT_FALSE(s.rounds[1].regroup);
}

TEST_F(AgentTest, ANodeAdmittedLateTakesTheJobsRoundAndRestarts) {
  config.max_restarts = 3;
  config.nnodes_min = 1;
  make(1, true);
  agent->on_joined(two_nodes(1), 1, RoundStart{4, 2});
  ASSERT_EQ(spawner.spawned.size(), 1u);
  EXPECT_EQ(spawner.spawned[0][0].env.at("TORCHELASTIC_RESTART_COUNT"), "2");
  RankOutcome root;
  root.exit = ExitInfo::exited(9);
  agent->on_verdict(JobVerdict{9, "", root, 0});
  ends(0, ExitInfo::signaled(SIGTERM));
  ASSERT_EQ(link.restarts, (std::vector<int>{3})) << "one restart left, now used";
}

// --- hangs (--hang-timeout) ---------------------------------------------------------

TEST_F(AgentTest, ARankWithoutProgressIsHungAskedForItsStacksAndFails) {
  config.hang_timeout_s = 10;
  make(3, false);
  EXPECT_EQ(spawner.spawned[0][0].env.at("DDPLAUNCH_PROGRESS_FD"), "3");
  EXPECT_EQ(spawner.spawned[0][0].env.at("PYTHONFAULTHANDLER"), "1");
  EXPECT_TRUE(spawner.spawned[0][0].progress_pipe);
  ASSERT_EQ(agent->next_deadline(), clock.t + 10s);
  pass(6s);
  agent->router().on_data(0, Stream::k_err, "step 1\n");    // a line: progress
  agent->on_progress(2);                                    // a write to its progress fd
  agent->router().on_data(1, Stream::k_out, "no newline");  // not progress
  pass(4s);
  EXPECT_EQ(spawner.signals, (std::vector<std::pair<int, int>>{{1, SIGABRT}}));
  ends(1, ExitInfo::signaled(SIGABRT));
  EXPECT_EQ(spawner.count(SIGTERM), 2) << "then the job stops as for any failure";
  ends(0, ExitInfo::signaled(SIGTERM));
  ends(2, ExitInfo::signaled(SIGTERM));
  ASSERT_TRUE(agent->done());
  const auto& s = agent->summary();
  EXPECT_EQ(s.exit_code, 134);
  ASSERT_TRUE(s.root_cause);
  EXPECT_EQ(s.root_cause->rank, 1);
  EXPECT_DOUBLE_EQ(s.root_cause->hung_for_s, 10);
  EXPECT_NE(format_failure_report(s).find("hung: no progress for 10.0 s"), std::string::npos);
}

// A rank whose output the launcher stops reading (the console is behind)
// cannot show progress: its clock stands still for as long, then goes on.
TEST_F(AgentTest, ARankStoppedByBackpressureIsNotHungItsClockStandsStill) {
  config.hang_timeout_s = 10;
  make(1, false);
  pass(4s);
  agent->on_output_paused(0, true);
  agent->on_output_paused(0, true);  // both of its streams
  pass(20s);
  agent->on_output_paused(0, false);
  pass(5s);
  EXPECT_EQ(spawner.count(SIGABRT), 0) << "stdout is still not read";
  agent->on_output_paused(0, false);
  EXPECT_EQ(agent->next_deadline(), clock.t + 6s) << "4 s before the stop count, 20 s do not";
  pass(5s);
  EXPECT_EQ(spawner.count(SIGABRT), 0);
  pass(1s);
  EXPECT_EQ(spawner.signals, (std::vector<std::pair<int, int>>{{0, SIGABRT}}));
}

TEST_F(AgentTest, AHungNativeRanksStacksArePrintedBeforeItIsAborted) {
  config.hang_timeout_s = 5;
  spawner.debugger = true;
  make(2, false);
  pass(4s);
  agent->on_progress(0);  // 1 s before the hang: less than half the timeout
  pass(1s);
  EXPECT_EQ(spawner.dumps, (std::vector<int>{1}));
  EXPECT_EQ(spawner.count(SIGABRT), 0) << "not while the debugger prints its stacks";
  agent->router().on_data(1, Stream::k_err, "#0  0x00007f clock_nanosleep\n");
  agent->on_stacks_dumped(1, 0);
  EXPECT_EQ(spawner.signals, (std::vector<std::pair<int, int>>{{1, SIGABRT}}));
  ends(1, ExitInfo::signaled(SIGABRT));
  ends(0, ExitInfo::signaled(SIGTERM));
  ASSERT_TRUE(agent->done());
  const auto& s = agent->summary();
  ASSERT_TRUE(s.root_cause);
  ASSERT_FALSE(s.root_cause->last_stderr.empty());
  EXPECT_EQ(s.root_cause->last_stderr.back(), "#0  0x00007f clock_nanosleep")
      << "the stacks are in the report";
}

// Every rank without progress for half the timeout gives its stacks before
// any is stopped; SIGABRT follows once every debugger is done, and the rank
// blamed is the one whose stack differs, not the first to end.
TEST_F(AgentTest, EveryRankWithoutProgressGivesItsStacksAndTheOddOneIsBlamed) {
  config.hang_timeout_s = 5;
  spawner.debugger = true;
  make(3, false);
  pass(2s);
  agent->on_progress(2);  // 3 s before the hang: without progress for long enough too
  pass(3s);
  EXPECT_EQ(spawner.dumps, (std::vector<int>{0, 1, 2}));
  agent->router().on_data(0, Stream::k_err, "TID 10:\n#0  0x1 MPI_Allreduce\n#1  0x2 main\n");
  agent->on_stacks_dumped(0, 0);
  agent->router().on_data(1, Stream::k_err, "TID 11:\n#0  0x1 read_input\n#1  0x2 main\n");
  agent->on_stacks_dumped(1, 0);
  EXPECT_EQ(spawner.count(SIGABRT), 0) << "not while a debugger still prints";
  agent->router().on_data(2, Stream::k_err, "TID 12:\n#0  0x1 MPI_Allreduce\n#1  0x2 main\n");
  agent->on_stacks_dumped(2, 0);
  EXPECT_EQ(spawner.signals,
            (std::vector<std::pair<int, int>>{{0, SIGABRT}, {1, SIGABRT}, {2, SIGABRT}}));
  ends(0, ExitInfo::signaled(SIGABRT));  // the first to end is a victim
  EXPECT_EQ(spawner.count(SIGTERM), 0) << "the others are giving their stacks";
  ends(1, ExitInfo::signaled(SIGABRT));
  ends(2, ExitInfo::signaled(SIGABRT));
  ASSERT_TRUE(agent->done());
  const auto& s = agent->summary();
  ASSERT_TRUE(s.root_cause);
  EXPECT_EQ(s.root_cause->rank, 1);
  EXPECT_EQ(s.root_cause->stack, "read_input ← main");
  for (const auto& o : s.ranks) {
    EXPECT_GT(o.hung_for_s, 0) << o.rank;
  }
}

TEST_F(AgentTest, ASlowDebuggerDoesNotDelayTheAbortPastItsWait) {
  config.hang_timeout_s = 5;
  spawner.debugger = true;
  make(1, false);
  pass(5s);
  ASSERT_EQ(spawner.dumps.size(), 1u);
  pass(k_stack_dump_wait - 1s);
  EXPECT_EQ(spawner.count(SIGABRT), 0);
  pass(1s);
  EXPECT_EQ(spawner.count(SIGABRT), 1);
  agent->on_stacks_dumped(0, 0);  // late: nothing more
  EXPECT_EQ(spawner.count(SIGABRT), 1);
}

TEST_F(AgentTest, APythonRankPrintsItsOwnStacks) {
  config.hang_timeout_s = 5;
  config.program = "python3";
  spawner.debugger = true;
  agent = std::make_unique<Agent>(
      config, env, NodeIdentity{"b", "10.0.0.2", 1, 4321, {}, "", {}, {}, "", {}, ""}, spawner,
      clock, nullptr, console);
  agent->start();
  pass(5s);
  EXPECT_TRUE(spawner.dumps.empty()) << "faulthandler prints them on SIGABRT";
  EXPECT_EQ(spawner.count(SIGABRT), 1);
}

TEST_F(AgentTest, AHungRankThatSurvivesSigabrtIsKilledAfterTheGracePeriod) {
  config.hang_timeout_s = 5;
  make(1, false);
  pass(5s);
  EXPECT_EQ(spawner.count(SIGABRT), 1);
  pass(29s);
  EXPECT_EQ(spawner.count(SIGKILL), 0);
  pass(1s);
  EXPECT_EQ(spawner.count(SIGKILL), 1);
  ends(0, ExitInfo::signaled(SIGKILL));
  ASSERT_TRUE(agent->done());
  EXPECT_EQ(agent->summary().exit_code, 137);
  EXPECT_GT(agent->summary().root_cause->hung_for_s, 0);
}

TEST_F(AgentTest, WithoutAHangTimeoutThereIsNoProgressPipe) {
  make(1, false);
  EXPECT_FALSE(spawner.spawned[0][0].progress_pipe);
  EXPECT_FALSE(spawner.spawned[0][0].env.contains("DDPLAUNCH_PROGRESS_FD"));
  EXPECT_FALSE(agent->next_deadline());
}

}  // namespace
}  // namespace ddplaunch
