#include <gtest/gtest.h>

#include <csignal>

#include "supervise/supervisor.hpp"

namespace ddplaunch {
namespace {

using namespace std::chrono_literals;
using SA = Supervisor::SignalAction;
const Supervisor::TimePoint t0{};

std::vector<SA> all(int n, int sig, int except = -1) {
  std::vector<SA> v;
  for (int i = 0; i < n; ++i) {
    if (i != except) {
      v.push_back({i, sig});
    }
  }
  return v;
}

TEST(Supervisor, AllSucceed) {
  Supervisor s(3, 30s);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(s.on_worker_exit(i, ExitInfo::exited(0), t0).signals.empty());
  }
  EXPECT_TRUE(s.finished());
  EXPECT_FALSE(s.stopping());
  EXPECT_EQ(s.exit_code(), 0);
}

TEST(Supervisor, FirstFailureIsTheRootCauseAndStopsTheOthers) {
  Supervisor s(4, 30s);
  auto a = s.on_worker_exit(2, ExitInfo::exited(7), t0);
  EXPECT_TRUE(a.local_failure);
  EXPECT_EQ(a.signals, all(4, SIGTERM, 2));
  EXPECT_EQ(s.deadline(), t0 + 30s);
  // Later failures caused by the teardown do not change the verdict.
  auto b = s.on_worker_exit(0, ExitInfo::signaled(SIGTERM), t0 + 1ms);
  EXPECT_FALSE(b.local_failure);
  EXPECT_TRUE(b.signals.empty());
  s.on_worker_exit(1, ExitInfo::exited(1), t0 + 2ms);
  EXPECT_EQ(s.root_cause(), 2);
  EXPECT_EQ(s.exit_code(), 7);
  EXPECT_TRUE(s.stopped_by_launcher(0));
  EXPECT_FALSE(s.stopped_by_launcher(2));
  // Rank 3 ignores SIGTERM: the deadline brings SIGKILL.
  EXPECT_TRUE(s.on_deadline(t0 + 29s).signals.empty());
  EXPECT_EQ(s.on_deadline(t0 + 30s).signals, (std::vector<SA>{{3, SIGKILL}}));
  s.on_worker_exit(3, ExitInfo::signaled(SIGKILL), t0 + 30s);
  EXPECT_TRUE(s.finished());
  EXPECT_FALSE(s.deadline());
  EXPECT_EQ(s.exit_code(), 7);
}

TEST(Supervisor, DeathBySignalMapsTo128PlusN) {
  Supervisor s(2, 30s);
  s.on_worker_exit(1, ExitInfo::signaled(SIGSEGV), t0);
  EXPECT_EQ(s.exit_code(), 128 + SIGSEGV);
  EXPECT_EQ(s.reason(), StopReason::k_worker_failed);
}

TEST(Supervisor, ZeroGraceKillsAtOnce) {
  Supervisor s(3, 0ms);
  EXPECT_EQ(s.on_worker_exit(0, ExitInfo::exited(1), t0).signals, all(3, SIGKILL, 0));
  EXPECT_FALSE(s.deadline());
}

TEST(Supervisor, LauncherSignalsAreForwardedAndDecideTheExitCode) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    Supervisor s(2, 10s);
    EXPECT_EQ(s.on_launcher_signal(sig, t0).signals, all(2, sig));
    EXPECT_EQ(s.reason(), StopReason::k_signal);
    s.on_worker_exit(0, ExitInfo::exited(1), t0);  // not a root cause: we stopped it
    s.on_worker_exit(1, ExitInfo::signaled(sig), t0);
    EXPECT_FALSE(s.root_cause());
    EXPECT_EQ(s.exit_code(), 128 + sig);
  }
}

TEST(Supervisor, SecondInterruptKillsAtOnce) {
  Supervisor s(2, 30s);
  s.on_launcher_signal(SIGINT, t0);
  EXPECT_EQ(s.on_launcher_signal(SIGINT, t0 + 1s).signals, all(2, SIGKILL));
  EXPECT_FALSE(s.deadline());
  EXPECT_EQ(s.exit_code(), 130);
}

TEST(Supervisor, UserSignalsAreForwardedAndTheJobGoesOn) {
  Supervisor s(2, 30s);
  s.on_worker_exit(0, ExitInfo::exited(0), t0);
  EXPECT_EQ(s.on_launcher_signal(SIGUSR1, t0).signals, (std::vector<SA>{{1, SIGUSR1}}));
  EXPECT_FALSE(s.stopping());
  EXPECT_EQ(s.on_launcher_signal(SIGUSR2, t0).signals, (std::vector<SA>{{1, SIGUSR2}}));
  s.on_worker_exit(1, ExitInfo::exited(0), t0);
  EXPECT_EQ(s.exit_code(), 0);
}

TEST(Supervisor, RemoteStopTakesTheRemoteExitCode) {
  Supervisor s(2, 5s);
  EXPECT_EQ(s.on_remote_stop(7, t0).signals, all(2, SIGTERM));
  EXPECT_EQ(s.reason(), StopReason::k_remote);
  s.on_worker_exit(0, ExitInfo::signaled(SIGTERM), t0);
  s.on_worker_exit(1, ExitInfo::signaled(SIGTERM), t0);
  EXPECT_EQ(s.exit_code(), 7);
  EXPECT_FALSE(s.root_cause());
  // A stop that arrives after a local failure changes nothing.
  Supervisor t(2, 5s);
  t.on_worker_exit(1, ExitInfo::exited(3), t0);
  EXPECT_TRUE(t.on_remote_stop(9, t0).signals.empty());
  EXPECT_EQ(t.exit_code(), 3);
}

TEST(Supervisor, SuccessThenFailureStillFails) {
  Supervisor s(2, 5s);
  s.on_worker_exit(0, ExitInfo::exited(0), t0);
  auto a = s.on_worker_exit(1, ExitInfo::exited(2), t0);
  EXPECT_TRUE(a.local_failure);
  EXPECT_TRUE(a.signals.empty()) << "nobody left to stop";
  EXPECT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 2);
}

// scancel signals the launcher and the workers alike, in no set order: a
// worker killed by a stop signal is held k_stop_hold, and the launcher's own
// stop signal (or another node's verdict) in that time wins over it.
struct HoldCase {
  const char* name;
  int then;  // 0: nothing; a signal: the launcher's; -1: a remote stop
  StopReason reason;
  int exit_code;
  bool rank_blamed;
};

// --hang-timeout: ranks whose stacks are being taken get no SIGTERM from the
// stop that the first of them to end starts (it would cut their stacks
// short); the grace period's SIGKILL still reaches them.
TEST(Supervisor, RanksGivingTheirStacksAreSparedTheStopsSigterm) {
  Supervisor s(3, 5s);
  s.taking_stacks(0);
  s.taking_stacks(1);
  auto a = s.on_worker_exit(0, ExitInfo::signaled(SIGABRT), t0);
  EXPECT_TRUE(a.local_failure);
  EXPECT_EQ(s.root_cause(), 0);
  EXPECT_EQ(a.signals, (std::vector<Supervisor::SignalAction>{{2, SIGTERM}}));
  a = s.on_deadline(t0 + 5s);
  EXPECT_EQ(a.signals, (std::vector<Supervisor::SignalAction>{{1, SIGKILL}, {2, SIGKILL}}));
}

TEST(Supervisor, AStopSignalWinsOverTheDeathsItCauses) {
  const HoldCase cases[] = {
      {"nothing follows: the rank is the root cause", 0, StopReason::k_worker_failed, 143, true},
      {"the launcher's SIGTERM follows", SIGTERM, StopReason::k_signal, 143, false},
      {"the launcher's SIGINT follows", SIGINT, StopReason::k_signal, 130, false},
      {"another node's verdict follows", -1, StopReason::k_remote, 143, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Supervisor s(2, 5s);
    auto a = s.on_worker_exit(0, ExitInfo::signaled(SIGTERM), t0);
    EXPECT_FALSE(a.local_failure);
    EXPECT_TRUE(a.signals.empty());
    EXPECT_FALSE(s.stopping());
    EXPECT_EQ(s.deadline(), t0 + Supervisor::k_stop_hold);
    // Rank 1 dies of the same scancel: still nobody blamed.
    s.on_worker_exit(1, ExitInfo::signaled(SIGTERM), t0 + 1ms);
    EXPECT_FALSE(s.finished()) << "a held death is not an ending yet";
    Supervisor::Actions after;
    if (c.then > 0) {
      after = s.on_launcher_signal(c.then, t0 + 2ms);
    } else if (c.then < 0) {
      after = s.on_remote_stop(143, t0 + 2ms);
    }
    after = s.on_deadline(t0 + Supervisor::k_stop_hold);
    EXPECT_EQ(after.local_failure, c.rank_blamed);
    EXPECT_TRUE(s.finished());
    EXPECT_EQ(s.reason(), c.reason);
    EXPECT_EQ(s.exit_code(), c.exit_code);
    EXPECT_EQ(s.root_cause().has_value(), c.rank_blamed);
    EXPECT_FALSE(s.deadline());
  }
}

TEST(Supervisor, OnlyStopSignalsAreHeld) {
  for (int sig : {SIGKILL, SIGSEGV, SIGABRT, SIGUSR1}) {
    Supervisor s(2, 5s);
    EXPECT_TRUE(s.on_worker_exit(0, ExitInfo::signaled(sig), t0).local_failure) << sig;
  }
  Supervisor s(2, 5s);
  s.on_worker_exit(0, ExitInfo::signaled(SIGHUP), t0);
  // While held, the others still run; the hold ends in a failure that stops them.
  EXPECT_TRUE(s.on_deadline(t0 + Supervisor::k_stop_hold - 1ms).signals.empty());
  auto a = s.on_deadline(t0 + Supervisor::k_stop_hold);
  EXPECT_TRUE(a.local_failure);
  EXPECT_EQ(a.signals, (std::vector<SA>{{1, SIGTERM}}));
  EXPECT_EQ(s.root_cause(), 0);
  EXPECT_EQ(s.deadline(), t0 + Supervisor::k_stop_hold + 5s);
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

TEST(Supervisor, APreemptionSendsItsSignalGivesTheGracePeriodAndExits75) {
  Supervisor s(3, std::chrono::seconds(30));
  const Supervisor::TimePoint t{};
  EXPECT_EQ(s.on_preempt(SIGUSR1, t).signals, all(3, SIGUSR1));
  Supervisor scheduled(2, 5s);
  EXPECT_TRUE(scheduled.on_preempt(SIGUSR1, t, true).signals.empty())
      << "the scheduler sent it to the workers itself";
  EXPECT_EQ(scheduled.reason(), StopReason::k_preempted);
  EXPECT_EQ(scheduled.on_deadline(t + 5s).signals, all(2, SIGKILL));
  EXPECT_EQ(s.reason(), StopReason::k_preempted);
  EXPECT_EQ(s.deadline(), t + std::chrono::seconds(30));
  // Ranks that checkpoint and exit 0 are no failure; the job's code stays 75.
  EXPECT_FALSE(s.on_worker_exit(0, ExitInfo::exited(0), t).local_failure);
  EXPECT_FALSE(s.on_worker_exit(1, ExitInfo::exited(0), t).local_failure);
  EXPECT_TRUE(s.on_preempt(SIGUSR1, t).signals.empty()) << "once";
  // One that ignores it is killed after the grace period.
  EXPECT_EQ(s.on_deadline(t + std::chrono::seconds(30)).signals, (std::vector<SA>{{2, SIGKILL}}));
  EXPECT_EQ(s.exit_code(), 75);
  EXPECT_FALSE(s.root_cause());
}

}  // namespace
}  // namespace ddplaunch
