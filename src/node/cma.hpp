// Whether Linux's cross-memory attach (process_vm_readv, "CMA") works between
// processes of one user on this host: Open MPI's shared-memory transport then
// copies a large message once instead of twice. It needs the system call
// (a container's seccomp filter may refuse it) and ptrace rights between
// sibling processes (Yama's ptrace_scope above 0 refuses them). Probed once,
// in the launcher: two reads of /proc and one system call.
#pragma once

#include <string>

namespace ddplaunch {

struct CmaProbe {
  bool works = false;
  std::string why;  // "process_vm_readv works and Yama allows it", or why not
};

CmaProbe probe_cma();

}  // namespace ddplaunch
