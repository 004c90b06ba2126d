// Child: the RAII owner of one started process (a worker, or what
// proc/starter.hpp starts): its pid (also its process group id, unless it
// shares the launcher's) and the read ends of its stdout and stderr pipes
// (and of its progress pipe, with --hang-timeout; the write end of its
// stdin, where it reads one). The pump takes the pipes it reads. A child that
// has not been reaped when its owner goes away (an exception unwinding, say)
// has its process group SIGKILLed and is reaped then: no worker outlives the
// object that started it. Move-only; not thread-safe.
#pragma once

#include <sys/types.h>

#include "posix/fd.hpp"

namespace ddplaunch {

class Child {
 public:
  // `own_group`: the child leads its own process group (every worker, except
  // rank 0 sharing the launcher's terminal).
  Child(pid_t pid, posix::Fd out, posix::Fd err, bool own_group = true)
      : m_pid(pid), m_out(std::move(out)), m_err(std::move(err)), m_own_group(own_group) {}
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return m_pid; }
  posix::Fd& out() { return m_out; }
  posix::Fd& err() { return m_err; }
  posix::Fd& progress() { return m_progress; }  // invalid without --hang-timeout
  posix::Fd& in() { return m_in; }              // invalid unless asked for
  // Sends `sig` to the child's process group, or to the child alone when it
  // shares the launcher's (gone already: not an error).
  void signal(int sig) const;
  // Someone (reap_any) has collected the child's exit status.
  void mark_reaped() { m_reaped = true; }
  bool reaped() const { return m_reaped; }

 private:
  void kill_and_reap();
  pid_t m_pid = -1;
  posix::Fd m_out;
  posix::Fd m_err;
  posix::Fd m_progress;
  posix::Fd m_in;
  bool m_reaped = false;
  bool m_own_group = true;
};

}  // namespace ddplaunch
