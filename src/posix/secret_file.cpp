#include "posix/secret_file.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "config/launch_error.hpp"
#include "posix/error.hpp"
#include "posix/fd.hpp"

namespace ddplaunch::posix {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) {
    return "a directory";
  }
  if (S_ISCHR(mode) || S_ISBLK(mode)) {
    return "a device";
  }
  if (S_ISFIFO(mode)) {
    return "a FIFO";
  }
  if (S_ISSOCK(mode)) {
    return "a socket";
  }
  return "not a regular file";
}

}  // namespace

SecretFile read_secret_file(const std::string& path, const std::string& what, bool strict) {
  SecretFile file;
  const std::string hint =
      "give a regular file holding the job's secret (for example: head -c 32 /dev/urandom | "
      "base64 > token; chmod 600 token)";
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) {
    throw UsageError(what + " " + path + ": cannot read it (" + std::strerror(errno) + "); " +
                     hint);
  }
  struct stat st = {};
  if (::fstat(fd.get(), &st) != 0) {
    throw UsageError(what + " " + path + ": cannot stat it (" + std::strerror(errno) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    throw UsageError(what + " " + path + " is " + kind_of(st.st_mode) + "; " + hint);
  }
  if (static_cast<size_t>(st.st_size) > k_max_secret_bytes) {
    throw UsageError(what + " " + path + " holds " + std::to_string(st.st_size) +
                     " bytes; a secret is at most " + std::to_string(k_max_secret_bytes) +
                     " bytes: is this the right file?");
  }
  if ((st.st_mode & 077) != 0) {
    const std::string message = what + " " + path + " can be read or written by other users";
    if (strict) {
      throw UsageError(message + " (--strict-token): chmod 600 it");
    }
    file.warning = message + ": chmod 600 it";
  }
  // One byte more than allowed tells a file that grew since fstat.
  std::string secret(k_max_secret_bytes + 1, '\0');
  size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = ::read(fd.get(), secret.data() + got, secret.size() - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      throw UsageError(what + " " + path + ": cannot read it (" + std::strerror(errno) + ")");
    }
  }
  if (got > k_max_secret_bytes) {
    throw UsageError(what + " " + path + " holds more than " + std::to_string(k_max_secret_bytes) +
                     " bytes; is this the right file?");
  }
  secret.resize(got);
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) {
    secret.pop_back();
  }
  if (secret.empty()) {
    throw UsageError(what + " " + path + " is empty; " + hint);
  }
  file.secret = std::move(secret);
  return file;
}

std::string user_token_path(const std::string& xdg_config_home, const std::string& home) {
  if (!xdg_config_home.empty()) {
    return xdg_config_home + "/ddplaunch/token";
  }
  return home.empty() ? "" : home + "/.config/ddplaunch/token";
}

void create_secret_file(const std::string& path, bool replace) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  // Each missing directory of the path, owner-only.
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at == dir.size() || dir[at] == '/') {
      const std::string part = dir.substr(0, at);
      if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
        throw_errno("mkdir " + part);
      }
    }
  }
  std::array<unsigned char, 32> bytes{};
  if (::getrandom(bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    throw_errno("getrandom");
  }
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string secret;
  for (const unsigned char b : bytes) {
    secret += k_hex[b >> 4];
    secret += k_hex[b & 15];
  }
  secret += '\n';
  // Written aside and renamed into place: a reader never sees half a secret.
  const std::string temp = path + ".new";
  ::unlink(temp.c_str());
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) {
    throw_errno("create " + temp);
  }
  if (!write_all(fd.get(), secret)) {
    throw_errno("write " + temp);
  }
  fd.close();
  if (!replace && ::link(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    if (err == EEXIST) {
      throw UsageError(path +
                       " exists already; `ddplaunch token init --force` replaces it (the "
                       "nodes of a running job must then restart)");
    }
    errno = err;
    throw_errno("create " + path);
  }
  if (replace && ::rename(temp.c_str(), path.c_str()) != 0) {
    throw_errno("rename " + temp);
  }
  ::unlink(temp.c_str());
}

}  // namespace ddplaunch::posix
