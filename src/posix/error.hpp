// errno → std::system_error with context ("open /x/y: No such file or directory").
#pragma once

#include <string_view>
#include <system_error>

namespace ddplaunch::posix {

// An exception for the current errno, described as "<context>: <strerror>".
std::system_error errno_error(std::string_view context);
[[noreturn]] void throw_errno(std::string_view context);

}  // namespace ddplaunch::posix
