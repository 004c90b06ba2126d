#include "posix/library.hpp"

namespace ddplaunch::posix {

void* open_libpmix(std::string& why) {
  for (const char* name : {"libpmix.so.2", "libpmix.so"}) {
    // Global: the library's own plugins (its MCA components) bind to it.
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_GLOBAL); handle != nullptr) {
      return handle;
    }
  }
  why = "cannot load libpmix.so.2 (install Debian's libpmix2): " + std::string(dlerror());
  return nullptr;
}

void* open_library(const char* soname, const char* package, std::string& why) {
  if (void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL); handle != nullptr) {
    return handle;
  }
  why = "cannot load " + std::string(soname) +
        (package != nullptr ? " (install Debian's " + std::string(package) + ")" : "") + ": " +
        std::string(dlerror());
  return nullptr;
}

}  // namespace ddplaunch::posix
