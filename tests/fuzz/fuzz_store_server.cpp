// libFuzzer: the real StoreServer (its own thread and epoll loop, as on node
// 0) fed arbitrary byte streams over loopback TCP, one connection per input.
// Inputs whose first byte is even are sent after a valid HELLO, so the
// fuzzer reaches every operation; odd ones start raw. A crash, a sanitizer
// report or a hang in the server thread fails the run.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "store/protocol.hpp"
#include "store/server.hpp"

using namespace ddplaunch;

namespace {

StoreServer& server() {
  static StoreServer* s = [] {
    ::signal(SIGPIPE, SIG_IGN);
    StoreOptions options;
    options.handshake_timeout = std::chrono::milliseconds(500);
    options.stall_timeout = std::chrono::milliseconds(500);
    return new StoreServer("127.0.0.1", 0, options);  // for the whole run
  }();
  return *s;
}

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      return;  // the server closed it: a fine answer to garbage
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int port = server().port();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return 0;
  }
  std::string stream;
  if (size > 0 && data[0] % 2 == 0) {
    stream = protocol::request::hello("fuzz-nonce-0123456789abcdef");
  }
  stream.append(reinterpret_cast<const char*>(data), size);
  send_all(fd, stream);
  ::shutdown(fd, SHUT_WR);
  // Read what it answers until it closes, or briefly (a parked GET or WAIT
  // stays parked until the connection goes).
  char buf[65536];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 50) == 1 && ::recv(fd, buf, sizeof(buf), 0) > 0) {
  }
  ::close(fd);
  return 0;
}
