// Libraries loaded at run time (dlopen), so that the binary needs only libc
// and a missing optional library is a message, not a failure to start. Each
// has one table of typed pointers (decltype of the header's declaration),
// bound once by a function that loads every symbol through load_symbol():
// libpmix (mpi/libpmix, for the PMIx server and the client half), libpmix's
// hwloc (mpi/hwloc_topology), libcrypto for the store's authentication
// (store/auth), NVML (node/nvml), libmicrohttpd for --metrics-port
// (agent/metrics_http).
#pragma once

#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace ddplaunch::posix {

// libpmix (Debian's libpmix2), opened once per process and never closed;
// nullptr with `why` set when it cannot be loaded.
void* open_libpmix(std::string& why);

// The library `soname` (local symbols, bound now), which Debian's package
// `package` installs (nullptr: none to name, as for NVML, which comes with
// the driver); never closed. nullptr with `why` set ("cannot load SONAME
// (install Debian's PACKAGE): ...") when it cannot be loaded.
void* open_library(const char* soname, const char* package, std::string& why);

// Sets `fn` to `name` in `handle` where the library has it (a symbol only
// newer versions have); false, and `fn` nullptr, where it has not.
template <typename F>
bool find_symbol(void* handle, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
  return fn != nullptr;
}

// Sets `fn` to `name` in `handle` (the library called `library` in
// messages); false, with `why` set, when it is missing.
template <typename F>
bool load_symbol(void* handle, F& fn, const char* name, std::string& why,
                 const char* library = "libpmix") {
  if (!find_symbol(handle, fn, name)) {
    why = std::string(library) + " has no " + name;
  }
  return fn != nullptr;
}

}  // namespace ddplaunch::posix
