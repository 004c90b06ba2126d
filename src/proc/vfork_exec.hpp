// The start of one child that shares the launcher's memory until it execs
// (proc/ only; spawn.hpp is the interface): clone3 into the job's cgroup
// where it can (proc/clone3.hpp), else vfork(), with the fallbacks settled
// here once for every later start (clone3 refused, CLOSE_RANGE_UNSHARE
// missing, the launcher moving into the cgroup). spawn.cpp prepares each
// worker's arguments and runs the lanes.
#pragma once

#include <sys/types.h>

#include <cstddef>

#include "posix/signals.hpp"
#include "proc/prepare.hpp"

namespace ddplaunch {

// What the child tells the parent through the memory they share.
struct ChildReport {
  volatile int shared = 0;  // set first thing: the memory really is shared
  volatile int error = 0;   // errno of the failed step
};

// Everything the child needs, prepared by the parent: the child allocates nothing.
struct ChildArgs {
  const Prepared* prepared = nullptr;
  pid_t parent = 0;
  int stdin_fd = 0, out_fd = 1, err_fd = 2;
  int progress_fd = -1;  // -1: none
  int report_fd = -1;    // -1: the report is read from shared memory only
  ChildReport* report = nullptr;
  bool own_group = true;
  posix::SignalReset signals;
  // >= 0: the child shares the launcher's fd table (CLONE_FILES) until it
  // unshares every fd from this one up (close_range's CLOSE_RANGE_UNSHARE):
  // the kernel then copies a handful of fds instead of all of them.
  int unshare_from = -1;
  volatile int* unshare_failed = nullptr;
  bool fail_unshare = false;  // a test's forced CLOSE_RANGE_UNSHARE failure
  char* stack = nullptr;      // the lane's stack for a clone3 child (stack_size bytes)
  size_t stack_size = 0;
};

// Starts a child for `a` and waits until it has exec'd (or failed to): see
// vfork_exec.cpp. Returns the pid, or -1 with the child's errno in
// *exec_errno (the child is reaped). A child that could not be started at
// all (out of processes or memory) throws SpawnError.
pid_t vfork_exec(ChildArgs a, int* exec_errno);

// Whether vfork() shares memory with the child here (known after the
// first start): only then may two threads start children.
bool vfork_shares_memory();
// Whether a child may share the fd table until it unshares (false once
// CLOSE_RANGE_UNSHARE failed here).
bool share_fd_table();

}  // namespace ddplaunch
