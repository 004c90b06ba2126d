// ExitInfo: how one process ended, keeping "exited with code N" apart from
// "killed by signal S" (folly::ProcessReturnCode style). A plain value.
#pragma once

#include <string>

namespace ddplaunch {

class ExitInfo {
 public:
  static ExitInfo exited(int code) { return ExitInfo(false, code); }
  static ExitInfo signaled(int sig) { return ExitInfo(true, sig); }
  // Decodes a waitpid() status (WIFEXITED / WIFSIGNALED).
  static ExitInfo from_wait_status(int status);

  bool success() const { return !m_signaled && m_value == 0; }
  bool by_signal() const { return m_signaled; }
  int code() const { return m_signaled ? -1 : m_value; }
  int signal() const { return m_signaled ? m_value : 0; }
  // The shell convention: the exit code, or 128+N for death by signal N.
  int shell_code() const { return m_signaled ? 128 + m_value : m_value; }
  // "exit code 3" or "signal SIGSEGV (11)".
  std::string describe() const;

  bool operator==(const ExitInfo&) const = default;

 private:
  ExitInfo(bool signaled, int value) : m_signaled(signaled), m_value(value) {}
  bool m_signaled;
  int m_value;
};

// "SIGSEGV" for 11; "SIG42" for numbers without a name.
std::string signal_name(int sig);

}  // namespace ddplaunch
