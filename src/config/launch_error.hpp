// The errors that end a launcher run: each carries its exit code (the
// public ddplaunch/error.hpp lists them) and a one-line message for the
// user that says what to do. Thrown only for conditions that end the run;
// main() catches them once. Launcher-internal: a program linking the store
// client sees StoreError instead. Pure.
#pragma once

#include <stdexcept>
#include <string>

#include "ddplaunch/error.hpp"

namespace ddplaunch {

class LaunchError : public std::runtime_error {
 public:
  LaunchError(int exit_code, const std::string& message)
      : std::runtime_error(message), m_exit_code(exit_code) {}
  int exit_code() const { return m_exit_code; }

 private:
  int m_exit_code;
};

// Bad input from the user: exit code 2.
class UsageError : public LaunchError {
 public:
  explicit UsageError(const std::string& message) : LaunchError(k_exit_usage, message) {}
};

}  // namespace ddplaunch
