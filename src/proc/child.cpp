#include "proc/child.hpp"

#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <utility>

namespace ddplaunch {

Child::Child(Child&& other) noexcept
    : m_pid(std::exchange(other.m_pid, -1)),
      m_out(std::move(other.m_out)),
      m_err(std::move(other.m_err)),
      m_progress(std::move(other.m_progress)),
      m_in(std::move(other.m_in)),
      m_reaped(other.m_reaped),
      m_own_group(other.m_own_group) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    m_pid = std::exchange(other.m_pid, -1);
    m_out = std::move(other.m_out);
    m_err = std::move(other.m_err);
    m_progress = std::move(other.m_progress);
    m_in = std::move(other.m_in);
    m_reaped = other.m_reaped;
    m_own_group = other.m_own_group;
  }
  return *this;
}

Child::~Child() {
  kill_and_reap();
}

void Child::signal(int sig) const {
  if (m_pid > 0 && !m_reaped) {
    kill(m_own_group ? -m_pid : m_pid, sig);
  }
}

void Child::kill_and_reap() {
  if (m_pid > 0 && !m_reaped) {
    kill(m_own_group ? -m_pid : m_pid, SIGKILL);
    int status = 0;
    while (waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
    }
    m_reaped = true;
  }
}

}  // namespace ddplaunch
