// The glibc floor: what lets the one binary built on Debian 12 (glibc 2.36)
// start on glibc 2.31 and later (Debian 11, Ubuntu 20.04 and 22.04, RHEL 9).
// Linked into the ddplaunch executable only, with the linker's --wrap for
// each symbol below (CMakeLists.txt lists them; docs/ARCHITECTURE.md, "The
// glibc floor", says why this and not an older sysroot). Every reference the
// program and the static libstdc++/libgcc make to a symbol whose default
// version is newer than 2.31 lands here, and goes on to the same function at
// the version 2.31 has (glibc keeps those versions for old programs), or to
// a stand-in where 2.31 has no such function. tests/integration/
// test_glibc_floor.py runs the binary in a Debian 11 root. x86-64 only.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "the glibc floor is for x86-64: configure with -DDDPLAUNCH_GLIBC_FLOOR=OFF"
#endif

// __wrap_NAME jumps to NAME@VERSION: same arguments, same function, the old
// version's name. A tail jump, so it fits any signature.
// clang-format off
#define DDPLAUNCH_AT_VERSION(name, version)                         \
  __asm__(".symver " #name "_floor, " #name "@" version "\n"         \
          ".globl __wrap_" #name "\n"                                \
          ".type __wrap_" #name ", @function\n"                      \
          "__wrap_" #name ":\n"                                      \
          "  jmp " #name "_floor@PLT\n");
// clang-format on

// libpthread's and libdl's functions moved into libc in 2.34 under a new
// version; 2.31 has them at 2.2.5 in libpthread.so.0 and libdl.so.2, which
// the binary names as needed (stubs on 2.34 and later).
DDPLAUNCH_AT_VERSION(pthread_create, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_join, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_detach, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_once, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_key_create, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(__pthread_key_create, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_key_delete, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_getspecific, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_setspecific, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_mutex_trylock, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_rwlock_rdlock, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_rwlock_wrlock, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_rwlock_unlock, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(pthread_cond_clockwait, "GLIBC_2.30")
DDPLAUNCH_AT_VERSION(dlopen, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(dlsym, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(dlerror, "GLIBC_2.2.5")
DDPLAUNCH_AT_VERSION(dladdr, "GLIBC_2.2.5")

// 2.33 made stat() and its kin functions of their own; before, the header
// called __xstat() and its kin with the struct's version (1 on x86-64).
int fxstat_floor(int version, int fd, struct stat* st);
int xstat_floor(int version, const char* path, struct stat* st);
int lxstat_floor(int version, const char* path, struct stat* st);
__asm__(".symver fxstat_floor, __fxstat@GLIBC_2.2.5");
__asm__(".symver xstat_floor, __xstat@GLIBC_2.2.5");
__asm__(".symver lxstat_floor, __lxstat@GLIBC_2.2.5");
enum { k_stat_version = 1 };

int __wrap_fstat(int fd, struct stat* st) {
  return fxstat_floor(k_stat_version, fd, st);
}
int __wrap_fstat64(int fd, struct stat* st) {
  return fxstat_floor(k_stat_version, fd, st);
}
int __wrap_stat(const char* path, struct stat* st) {
  return xstat_floor(k_stat_version, path, st);
}
int __wrap_lstat(const char* path, struct stat* st) {
  return lxstat_floor(k_stat_version, path, st);
}

// 2.34's start: the program's own constructors were run by the `init` the
// program passed (its __libc_csu_init); since 2.34 libc runs them when init
// is NULL, as this build's start files pass. The old entry point, given
// this init, does the same on 2.31 and on 2.34 and later (which still runs
// an init it is given).
int libc_start_main_floor(int (*main)(int, char**, char**), int argc, char** argv,
                          void (*init)(int, char**, char**), void (*fini)(void),
                          void (*rtld_fini)(void), void* stack_end);
__asm__(".symver libc_start_main_floor, __libc_start_main@GLIBC_2.2.5");
extern void (*__init_array_start[])(int, char**, char**) __attribute__((visibility("hidden")));
extern void (*__init_array_end[])(int, char**, char**) __attribute__((visibility("hidden")));
extern void _init(void);

static void run_init(int argc, char** argv, char** envp) {
  _init();
  const size_t count = (size_t)(__init_array_end - __init_array_start);
  for (size_t i = 0; i < count; ++i) {
    __init_array_start[i](argc, argv, envp);
  }
}

int __wrap___libc_start_main(int (*main)(int, char**, char**), int argc, char** argv,
                             void (*init)(int, char**, char**), void (*fini)(void),
                             void (*rtld_fini)(void), void* stack_end) {
  (void)init;  // NULL from this build's start files
  return libc_start_main_floor(main, argc, argv, run_init, fini, rtld_fini, stack_end);
}

// libstdc++'s std::random_device ("default"): 2.36's arc4random, here the
// kernel's generator as arc4random itself uses it.
uint32_t __wrap_arc4random(void) {
  uint32_t value = 0;
  size_t got = 0;
  while (got < sizeof(value)) {
    const ssize_t n = getrandom((char*)&value + got, sizeof(value) - got, 0);
    if (n > 0) {
      got += (size_t)n;
    } else if (errno != EINTR) {
      abort();  // no kernel generator (Linux before 3.17): nothing safe to return
    }
  }
  return value;
}

// libgcc's unwinder (exceptions) finds a frame's object with 2.35's
// _dl_find_object. This answers as it does, from dl_iterate_phdr, which the
// unwinder itself used before 2.35: the object whose loaded segments hold
// the address, and its PT_GNU_EH_FRAME.
struct find_object_search {
  uintptr_t pc;
  struct dl_find_object* out;
  int found;
};

static int find_object_in(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct find_object_search* s = data;
  uintptr_t start = UINTPTR_MAX, end = 0;
  const void* eh_frame = NULL;
  int holds = 0;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    const uintptr_t at = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD) {
      start = at < start ? at : start;
      end = at + ph->p_memsz > end ? at + ph->p_memsz : end;
      holds = holds || (s->pc >= at && s->pc < at + ph->p_memsz);
    } else if (ph->p_type == PT_GNU_EH_FRAME) {
      eh_frame = (const void*)at;
    }
  }
  if (!holds) {
    return 0;
  }
  memset(s->out, 0, sizeof(*s->out));
  s->out->dlfo_map_start = (void*)start;
  s->out->dlfo_map_end = (void*)end;
  s->out->dlfo_eh_frame = (void*)eh_frame;
  s->found = 1;
  return 1;
}

int __wrap__dl_find_object(void* pc, struct dl_find_object* result) {
  struct find_object_search s = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(find_object_in, &s);
  return s.found ? 0 : -1;
}

// lines.cpp asks glibc which SIMD it may use (CPU_FEATURE_ACTIVE, 2.33).
// Before 2.33 there is no such answer: all zero, and the lines are split
// with SSE2, the x86-64 baseline.
void* dlvsym_floor(void* handle, const char* name, const char* version);
__asm__(".symver dlvsym_floor, dlvsym@GLIBC_2.2.5");
typedef const void* (*CpuidLeaf)(unsigned int);

const void* __wrap___x86_get_cpuid_feature_leaf(unsigned int leaf) {
  static const unsigned char k_none[64] = {0};
  void* found = dlvsym_floor(RTLD_DEFAULT, "__x86_get_cpuid_feature_leaf", "GLIBC_2.33");
  if (found == NULL) {
    return k_none;
  }
  CpuidLeaf glibc = NULL;
  memcpy(&glibc, &found, sizeof(glibc));  // (ISO C has no cast between the two)
  return glibc(leaf);
}

// libstdc++ (and its inline parts in every file) reads 2.32's
// __libc_single_threaded to skip atomic operations while a program has one
// thread. Defined here, never set: the atomic operations always.
char __libc_single_threaded = 0;
