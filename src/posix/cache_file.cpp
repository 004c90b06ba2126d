#include "posix/cache_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "posix/fd.hpp"

namespace ddplaunch::posix {

std::optional<std::string> read_cache_file(const std::string& path, std::string_view header,
                                           size_t max_bytes) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || static_cast<size_t>(st.st_size) > max_bytes) {
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return std::nullopt;  // changed under us: the caller computes it again
    }
    got += static_cast<size_t>(n);
  }
  const size_t eol = text.find('\n');
  if (eol == std::string::npos || std::string_view(text).substr(0, eol) != header) {
    return std::nullopt;
  }
  text.erase(0, eol + 1);
  return text;
}

bool write_cache_file(const std::string& path, std::string_view header, std::string_view body) {
  std::string tmp = path + ".XXXXXX";
  const Fd fd(::mkostemp(tmp.data(), O_CLOEXEC));  // mode 0600
  if (!fd) {
    return false;
  }
  std::string head(header);
  head += '\n';
  if (!write_all(fd.get(), head) || !write_all(fd.get(), body) ||
      ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace ddplaunch::posix
