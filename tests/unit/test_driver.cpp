// Driver::wait_readable(), the wait before the Agent exists (the PMIx address
// exchange under mpirun): a stop signal ends it at once with 128+N, a
// forwarded one is dropped, and it returns when its fd is readable or its
// deadline passes. The signals are real: raise() makes them pending on this
// thread, where the SignalFd has blocked them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <functional>
#include <string>

#include "agent/driver.hpp"
#include "config/launch_error.hpp"
#include "posix/fd.hpp"
#include "proc/spawn.hpp"
#include "proc/spawner.hpp"

namespace ddplaunch {
namespace {

using namespace std::chrono_literals;

struct Waiting {
  // The SignalFd first: the console's threads start with the signals blocked.
  posix::SignalFd signals{{SIGTERM, SIGINT, SIGUSR1}};
  posix::Fd null{::open("/dev/null", O_WRONLY | O_CLOEXEC)};
  ConsoleWriter console{ConsoleWriter::Limits{}, null.get(), null.get()};
  Driver driver{signals, console};
  int pipe_fds[2] = {-1, -1};
  posix::Fd read_end, write_end;

  Waiting() {
    EXPECT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
    read_end = posix::Fd(pipe_fds[0]);
    write_end = posix::Fd(pipe_fds[1]);
  }
  ~Waiting() {
    while (signals.read_one()) {
    }
  }
};

TEST(DriverWait, AStopSignalEndsTheWaitAtOnceWithItsExitCode) {
  Waiting w;
  ::raise(SIGTERM);
  try {
    // Nothing ever writes the pipe: only the signal can end this before 30 s.
    w.driver.wait_readable(w.read_end.get(), std::chrono::steady_clock::now() + 30s,
                           "exchanging node 0's address through PMIx");
    FAIL() << "the wait returned although SIGTERM was pending";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.exit_code(), 128 + SIGTERM);
    EXPECT_NE(std::string(e.what()).find("while exchanging node 0's address through PMIx"),
              std::string::npos)
        << e.what();
  }
}

TEST(DriverWait, AForwardedSignalIsDroppedAndTheWaitGoesOn) {
  Waiting w;
  ::raise(SIGUSR1);
  // Not a stop: the wait runs to its deadline instead of throwing.
  EXPECT_FALSE(w.driver.wait_readable(w.read_end.get(), std::chrono::steady_clock::now() + 100ms,
                                      "waiting"));
  // SIGUSR1 was read and dropped on the way, not left pending for the run.
  EXPECT_FALSE(w.signals.read_one());
}

TEST(DriverWait, APassedDeadlineReturnsFalseWithoutASignal) {
  Waiting w;
  EXPECT_FALSE(w.driver.wait_readable(w.read_end.get(), std::chrono::steady_clock::now(), "x"));
  // The fd is no longer watched: a second wait on it is allowed.
  ASSERT_EQ(::write(w.write_end.get(), "x", 1), 1);
  EXPECT_TRUE(
      w.driver.wait_readable(w.read_end.get(), std::chrono::steady_clock::now() + 1h, "waiting"));
}

// Driver::wait_child(), the health check's wait: a child's output comes
// through a pump on the loop and its end through the signalfd's SIGCHLD.
struct ChildWaiting {
  posix::SignalFd signals{{SIGTERM, SIGCHLD}};
  posix::Fd null{::open("/dev/null", O_WRONLY | O_CLOEXEC)};
  ConsoleWriter console{ConsoleWriter::Limits{}, null.get(), null.get()};
  Driver driver{signals, console};
  static Child start(const std::string& script) {
    WorkerSpec spec;
    spec.argv = {"/bin/sh", "-c", script};
    return std::move(spawn_workers({spec}).front());
  }
};

TEST(DriverWaitChild, ItsOutputAndItsEndComeThroughTheLoop) {
  ChildWaiting w;
  Child child = ChildWaiting::start("echo one; printf two >&2; exit 3");
  std::string got;
  const auto ended = w.driver.wait_child(
      child, [&got](std::string_view data) { got += data; }, std::chrono::steady_clock::now() + 30s,
      "running a test");
  ASSERT_TRUE(ended);
  child.mark_reaped();
  EXPECT_EQ(ended->code(), 3);
  // Its stdout; its stderr too where it joins it (the health check's does).
  EXPECT_EQ(got.substr(0, 4), "one\n");
}

TEST(DriverWaitChild, ItsDeadlineLeavesItRunningThenItsEndIsTakenAsItComes) {
  ChildWaiting w;
  Child child = ChildWaiting::start("exec sleep 30");
  const auto no_output = [](std::string_view) {};
  EXPECT_FALSE(w.driver.wait_child(child, no_output, std::chrono::steady_clock::now() + 100ms,
                                   "running a test"));
  child.signal(SIGKILL);
  const auto ended = w.driver.wait_child(child, no_output, std::chrono::steady_clock::now() + 30s,
                                         "running a test");
  ASSERT_TRUE(ended);
  child.mark_reaped();
  EXPECT_TRUE(ended->by_signal());
}

TEST(DriverWaitChild, AStopSignalEndsTheWaitWithItsExitCode) {
  ChildWaiting w;
  Child child = ChildWaiting::start("exec sleep 30");
  ::raise(SIGTERM);
  EXPECT_THROW(
      w.driver.wait_child(
          child, [](std::string_view) {}, std::chrono::steady_clock::now() + 30s, "running a test"),
      LaunchError);
  // The Child kills and reaps it as it goes.
}

// Driver::run() with workers whose exits the test orders: each round's
// children have real pipes, and their ends come from a queue the fake's
// reap() empties, so two rounds' exits can fall in one batch.
struct OrderedChildren : WorkerChildren {
  std::vector<Child> kids;
  uint64_t rounds = 0;
  std::deque<std::pair<pid_t, ExitInfo>> exits;
  // What round `round`'s only worker does before it ends: writes to its
  // progress pipe (or not), closes its pipes, and ends with `how`.
  std::function<void(uint64_t round, Child& child, posix::Fd& progress, ExitInfo& how)> script;

  std::vector<pid_t> spawn(const std::vector<WorkerSpec>& workers) override {
    kids.clear();
    ++rounds;
    std::vector<pid_t> pids;
    for (size_t i = 0; i < workers.size(); ++i) {
      auto out = posix::make_pipe();
      auto err = posix::make_pipe();
      auto progress = posix::make_pipe();
      // No process behind it: marked reaped, so nothing is ever signalled.
      const pid_t pid = static_cast<pid_t>(1000 * rounds + i);
      Child child(pid, std::move(out.read), std::move(err.read));
      child.progress() = std::move(progress.read);
      child.mark_reaped();
      ExitInfo how = ExitInfo::exited(0);
      script(rounds - 1, child, progress.write, how);
      exits.emplace_back(pid, how);  // its pipes' write ends close as they go
      kids.push_back(std::move(child));
      pids.push_back(pid);
    }
    ::raise(SIGCHLD);
    return pids;
  }
  void signal(int, int) override {}
  void kill_all() override {}
  std::vector<Child>& children() override { return kids; }
  uint64_t generation() const override { return rounds; }
  std::optional<int> debugger_of(pid_t) override { return std::nullopt; }
  std::optional<int> local_rank_of(pid_t pid) const override {
    for (size_t i = 0; i < kids.size(); ++i) {
      if (kids[i].pid() == pid) {
        return static_cast<int>(i);
      }
    }
    return std::nullopt;
  }
  std::optional<std::pair<pid_t, ExitInfo>> reap() override {
    if (exits.empty()) {
      return std::nullopt;
    }
    auto first = exits.front();
    exits.pop_front();
    return first;
  }
};

// The race fixed twice (7861430, e542bbc): round 0's worker fails, and its
// exit, handled in the reaping loop, restarts the job at once (its pipes
// had ended); round 1's worker wrote its progress and failed in the same
// batch of exits. Its pipes must be in the pump before its exit is handled,
// or its progress is lost and round 1 counts as one without progress.
TEST(DriverRun, ANewRoundsWorkerEndingInTheSameReapingLoopHasItsProgressCounted) {
  posix::SignalFd signals{{SIGTERM, SIGCHLD}};
  posix::Fd null{::open("/dev/null", O_WRONLY | O_CLOEXEC)};
  ConsoleWriter console{ConsoleWriter::Limits{}, null.get(), null.get()};
  Driver driver{signals, console};
  Config config;
  config.program = "train";
  config.nproc_per_node = 1;
  config.max_restarts = 3;
  config.restart_min_progress = 1;
  config.max_no_progress_restarts = 0;  // a round without progress ends the job
  config.term_timeout_s = 5;
  const EnvMap env{{"PATH", "/bin"}};
  OrderedChildren children;
  // Rounds 0 and 1 write their progress and fail (round 1 is spawned within
  // the reaping of round 0's exit, and its exit is next in that loop); round
  // 2 succeeds.
  children.script = [](uint64_t round, Child&, posix::Fd& progress, ExitInfo& how) {
    if (round < 2) {
      ASSERT_EQ(::write(progress.get(), "p", 1), 1);
      how = ExitInfo::exited(1);
    }
  };
  SystemClock clock;
  Agent agent(config, env, NodeIdentity{"b", "10.0.0.2", 1, 4321, {}, "", {}, {}, "", {}, ""},
              children, clock, nullptr, console);
  agent.start();
  driver.run(agent, children, false);
  const JobSummary& summary = agent.summary();
  ASSERT_GE(summary.rounds.size(), 2u);
  EXPECT_EQ(summary.rounds[1].progress_events, 1) << "round 1's progress, read before its exit";
  EXPECT_NE(summary.rounds[1].made_progress, false);
  EXPECT_EQ(children.rounds, 3u) << "round 1 had progress: a restart, not the end";
  EXPECT_EQ(summary.exit_code, 0);
}

}  // namespace
}  // namespace ddplaunch
