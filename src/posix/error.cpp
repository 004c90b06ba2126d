#include "posix/error.hpp"

#include <cerrno>
#include <string>

namespace ddplaunch::posix {

std::system_error errno_error(std::string_view context) {
  return std::system_error(errno, std::generic_category(), std::string(context));
}

void throw_errno(std::string_view context) {
  throw errno_error(context);
}

}  // namespace ddplaunch::posix
