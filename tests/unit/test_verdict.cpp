#include <gtest/gtest.h>

#include <csignal>

#include "supervise/verdict.hpp"

namespace ddplaunch {
namespace {

RankOutcome rank_on(int rank, int node) {
  RankOutcome o;
  o.rank = rank;
  o.node_rank = node;
  o.exit = ExitInfo::exited(7);
  return o;
}

TEST(Verdict, MergeTable) {
  const LocalEnd ok{};
  const LocalEnd failed{StopReason::k_worker_failed, 7, rank_on(3, 1), std::nullopt, std::nullopt};
  const LocalEnd signaled{StopReason::k_signal, 130, std::nullopt, SIGINT, std::nullopt};
  const LocalEnd remote{StopReason::k_remote, 9, std::nullopt, std::nullopt, std::nullopt};
  const LocalEnd late{StopReason::k_remote, 9, std::nullopt, std::nullopt, SIGTERM};
  const JobVerdict success{0, "", std::nullopt, 0};
  const JobVerdict ours_failed{7, "", rank_on(3, 1), 1};
  const JobVerdict theirs_failed{9, "", rank_on(0, 0), 0};
  const JobVerdict ours_signal{130, "node 1 (b) received SIGINT", std::nullopt, 1};
  const JobVerdict lost{4, "lost contact with the store", std::nullopt, -1};

  struct Case {
    const char* name;
    LocalEnd local;
    std::optional<JobVerdict> job;
    int exit_code;
    StopReason reason;
    std::optional<int> root_rank;
    const char* message;
  };
  const Case cases[] = {
      {"one node, success", ok, std::nullopt, 0, StopReason::k_none, std::nullopt, ""},
      {"one node, failure", failed, std::nullopt, 7, StopReason::k_worker_failed, 3, ""},
      {"every node succeeded", ok, success, 0, StopReason::k_none, std::nullopt, ""},
      {"our rank failed first", failed, ours_failed, 7, StopReason::k_worker_failed, 3, ""},
      {"another node's rank failed first", failed, theirs_failed, 9, StopReason::k_remote, 0, ""},
      {"another node failed", remote, theirs_failed, 9, StopReason::k_remote, 0, ""},
      {"our signal stopped the job", signaled, ours_signal, 130, StopReason::k_signal, std::nullopt,
       "node 1 (b) received SIGINT"},
      {"the store was lost", remote, lost, 4, StopReason::k_remote, std::nullopt,
       "lost contact with the store"},
      {"unconfirmed: our own verdict", signaled, std::nullopt, 130, StopReason::k_signal,
       std::nullopt, ""},
      {"a late signal", late, theirs_failed, 143, StopReason::k_remote, 0,
       "ddplaunch received SIGTERM while the job was ending"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Decision d = merge_verdict(c.local, c.job, 1);
    EXPECT_EQ(d.exit_code, c.exit_code);
    EXPECT_EQ(d.reason, c.reason);
    EXPECT_EQ(d.root_cause ? std::optional(d.root_cause->rank) : std::nullopt, c.root_rank);
    EXPECT_EQ(d.message, c.message);
  }
}

TEST(Verdict, WhatFollowsARound) {
  Decision failed;
  failed.exit_code = 7;
  failed.root_cause = rank_on(3, 1);
  failed.reason = StopReason::k_remote;
  Decision lost;
  lost.exit_code = 4;
  lost.message = "node 2 was lost";
  Decision signaled = failed;
  signaled.stop_signal = SIGTERM;
  const JobVerdict lost_2{4, "node 2 was lost", std::nullopt, 0, 2};
  const JobVerdict store_gone{4, "lost contact with the store", std::nullopt, -1};
  const JobVerdict regroup{0, "node 3 joined", std::nullopt, 0, -1, true};
  const JobVerdict rank_failed{7, "", rank_on(3, 1), 1};
  struct Case {
    const char* name;
    Decision decision;
    std::optional<JobVerdict> job;
    bool elastic;
    int node_rank;
    int restarts;
    NextRound expected;
  };
  const Case cases[] = {
      {"a rank failed, restarts remain", failed, rank_failed, false, 0, 0, NextRound::k_restart},
      {"a rank failed, none remain", failed, rank_failed, false, 0, 1, NextRound::k_none},
      {"one node: its own failure", failed, std::nullopt, false, 0, 0, NextRound::k_restart},
      {"a stop signal is never restarted", signaled, rank_failed, false, 0, 0, NextRound::k_none},
      {"a lost node ends a fixed-size job", lost, lost_2, false, 0, 0, NextRound::k_none},
      {"an elastic job goes on without it", lost, lost_2, true, 0, 0, NextRound::k_restart},
      {"the lost node itself does not", lost, lost_2, true, 2, 0, NextRound::k_none},
      {"nor without restarts", lost, lost_2, true, 0, 1, NextRound::k_none},
      {"the store host's loss ends it", lost, store_gone, true, 1, 0, NextRound::k_none},
      {"a newcomer regroups, whatever the count", Decision{}, regroup, true, 1, 1,
       NextRound::k_regroup},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const RestartBudget budget{c.restarts, 1};
    EXPECT_EQ(next_round_after(c.decision, c.job, c.elastic, c.node_rank, budget, true),
              c.expected);
    // Not following progress, a round's progress changes nothing.
    EXPECT_EQ(next_round_after(c.decision, c.job, c.elastic, c.node_rank, budget, false),
              c.expected);
  }
}

TEST(Verdict, FollowingProgressOnlyRoundsThatMadeProgressUseRestarts) {
  Decision failed;
  failed.exit_code = 7;
  failed.root_cause = rank_on(3, 1);
  Decision lost;
  lost.exit_code = 4;
  lost.message = "node 2 was lost";
  const JobVerdict lost_2{4, "node 2 was lost", std::nullopt, 0, 2};
  struct Case {
    const char* name;
    Decision decision;
    bool progress;
    int restarts;
    int no_progress;
    NextRound expected;
  };
  const Case cases[] = {
      {"progress, restarts remain", failed, true, 0, 2, NextRound::k_restart},
      {"progress, none remain", failed, true, 2, 0, NextRound::k_none},
      {"no progress: --max-restarts is not used", failed, false, 2, 0,
       NextRound::k_restart_no_progress},
      {"no progress, 3 in a row already", failed, false, 0, 3, NextRound::k_stalled},
      {"a lost node is not a rank's failure", lost, false, 0, 3, NextRound::k_restart},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const RestartBudget budget{c.restarts, 2, true, c.no_progress, 3};
    const std::optional<JobVerdict> job =
        c.decision.root_cause ? std::nullopt : std::optional<JobVerdict>(lost_2);
    EXPECT_EQ(next_round_after(c.decision, job, true, 0, budget, c.progress), c.expected);
  }
  // --max-restarts 0 (the default) is no restart, progress or not.
  EXPECT_EQ(
      next_round_after(failed, std::nullopt, false, 0, RestartBudget{0, 0, true, 0, 3}, false),
      NextRound::k_none);
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

TEST(Verdict, APreemptionIsPreemptedOnEveryNodeAndNeverRestarted) {
  JobVerdict preempted{75, "node 1 (b) received SIGUSR1 (--preempt-signal)", std::nullopt, 1};
  preempted.preempt = SIGUSR1;
  LocalEnd here;
  here.reason = StopReason::k_preempted;
  here.exit_code = 75;
  for (int node : {0, 1}) {
    const Decision d = merge_verdict(here, preempted, node);
    EXPECT_EQ(d.exit_code, 75);
    EXPECT_EQ(d.reason, StopReason::k_preempted);
    EXPECT_EQ(next_round_after(d, preempted, true, node, RestartBudget{0, 5}, true),
              NextRound::k_none);
  }
}

}  // namespace
}  // namespace ddplaunch
