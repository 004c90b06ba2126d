// clone3(CLONE_VM | CLONE_VFORK, ...) on a stack the caller provides: vfork's
// cost (no page tables copied; the caller sleeps until the child execs or
// exits) with clone3's flags (CLONE_INTO_CGROUP, CLONE_FILES). glibc has no
// clone3 wrapper that starts the child on another stack, so the system call
// is made here, in a few lines of x86-64 assembly. Thread-safe: it keeps no
// state (each caller passes its own stack).
#pragma once

#include <linux/sched.h>

namespace ddplaunch {

// Whether clone3_vfork() can be used in this build: x86-64, and no
// sanitizer (AddressSanitizer and ThreadSanitizer cannot follow a child
// that shares the parent's memory on a stack of its own; those builds use
// vfork, which they turn into a fork).
constexpr bool clone3_vfork_available() {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return false;
#endif
}

// Starts a child with `args` (whose flags must include CLONE_VM and
// CLONE_VFORK, and whose stack is free until the child execs): the child
// runs `child_main(child_arg)` on that stack and must never return (it
// execs or calls _exit). Returns the child's pid in the parent, or -errno
// (the kernel's: ENOSYS, E2BIG, EINVAL on an older kernel; EPERM, EACCES,
// EBUSY, EOPNOTSUPP when the cgroup refuses; EAGAIN, ENOMEM at a process
// limit). Where clone3_vfork_available() is false, returns -ENOSYS.
long clone3_vfork(clone_args* args, void (*child_main)(void*), void* child_arg);

}  // namespace ddplaunch
