#include "node/cma.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "posix/fd.hpp"

namespace ddplaunch {

CmaProbe probe_cma() {
  // The launcher reads a word of its own: a filter that refuses the call
  // refuses it here too (EPERM, ENOSYS).
  long word = 0x5eed;
  long copy = 0;
  iovec local{&copy, sizeof copy};
  iovec remote{&word, sizeof word};
  if (::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) != sizeof copy || copy != word) {
    return {false, std::string("process_vm_readv fails here (") + std::strerror(errno) +
                       "; a container's seccomp filter?)"};
  }
  // Yama: 0 lets a process read any of its user's; 1 only its descendants
  // (ranks are siblings); 2 and 3 neither. No Yama: the user's rule.
  auto scope = posix::read_small_file("/proc/sys/kernel/yama/ptrace_scope", 16);
  if (scope && !scope->empty() && (*scope)[0] != '0') {
    return {false, "Yama's ptrace_scope is " + scope->substr(0, 1) +
                       " (/proc/sys/kernel/yama/ptrace_scope): ranks may not read each other"};
  }
  return {true, scope ? "process_vm_readv works and Yama's ptrace_scope is 0"
                      : "process_vm_readv works and there is no Yama"};
}

}  // namespace ddplaunch
