#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>

#include "supervise/exit_info.hpp"

namespace ddplaunch {
namespace {

TEST(ExitInfo, ExitCodesAndSignalsMapToShellCodes) {
  struct Case {
    ExitInfo info;
    int shell;
    bool success;
    const char* text;
  };
  const Case cases[] = {
      {ExitInfo::exited(0), 0, true, "exit code 0"},
      {ExitInfo::exited(7), 7, false, "exit code 7"},
      {ExitInfo::exited(255), 255, false, "exit code 255"},
      {ExitInfo::signaled(SIGSEGV), 139, false, "signal SIGSEGV (11)"},
      {ExitInfo::signaled(SIGKILL), 137, false, "signal SIGKILL (9)"},
      {ExitInfo::signaled(SIGINT), 130, false, "signal SIGINT (2)"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.info.shell_code(), c.shell) << c.text;
    EXPECT_EQ(c.info.success(), c.success) << c.text;
    EXPECT_EQ(c.info.describe(), c.text);
  }
}

TEST(ExitInfo, DecodesWaitStatus) {
  // Encodings as the kernel produces them: (code << 8) for exit, sig for death.
  EXPECT_EQ(ExitInfo::from_wait_status(3 << 8), ExitInfo::exited(3));
  EXPECT_EQ(ExitInfo::from_wait_status(SIGTERM), ExitInfo::signaled(SIGTERM));
  EXPECT_EQ(ExitInfo::from_wait_status(SIGABRT | 0x80), ExitInfo::signaled(SIGABRT));  // core
}

TEST(ExitInfo, SignalNames) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGUSR2), "SIGUSR2");
  EXPECT_EQ(signal_name(40), "SIG40");
}

}  // namespace
}  // namespace ddplaunch
