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
#include <string>

#include "agent/driver.hpp"
#include "config/launch_error.hpp"
#include "posix/fd.hpp"
#include "proc/spawn.hpp"

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

}  // namespace
}  // namespace ddplaunch
