#include "proc/clone3.hpp"

#include <sys/syscall.h>

#include <cerrno>

namespace ddplaunch {

#if defined(__x86_64__)

namespace {

// The child's first frame (it never returns: the ud2 after the call traps if
// it did).
[[noreturn]] void run_child(void (*child_main)(void*), void* child_arg) {
  child_main(child_arg);
  __builtin_trap();
}

}  // namespace

long clone3_vfork(clone_args* args, void (*child_main)(void*), void* child_arg) {
  if constexpr (!clone3_vfork_available()) {
    return -ENOSYS;
  }
  long ret;
  // Kept in callee-saved registers, which the child finds as they were: it
  // starts on its own stack, where nothing of the parent's frame is.
  register void (*entry)(void*) asm("r12") = child_main;
  register void* entry_arg asm("r13") = child_arg;
  register void (*start)(void (*)(void*), void*) asm("r14") = run_child;
  asm volatile(
      "syscall\n\t"
      "testq %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      // The child: no frame to return to; run_child(entry, entry_arg).
      "xorl %%ebp, %%ebp\n\t"
      "movq %%r12, %%rdi\n\t"
      "movq %%r13, %%rsi\n\t"
      "callq *%%r14\n\t"
      "ud2\n\t"
      "1:\n\t"
      : "=a"(ret)
      : "0"(static_cast<long>(SYS_clone3)), "D"(args), "S"(sizeof(clone_args)), "r"(entry),
        "r"(entry_arg), "r"(start)
      : "rcx", "r11", "memory");
  return ret;
}

#else

long clone3_vfork(clone_args*, void (*)(void*), void*) {
  return -ENOSYS;
}

#endif

}  // namespace ddplaunch
