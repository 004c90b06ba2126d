#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>

#include "mpi/pmix_relay.hpp"
#include "posix/net.hpp"

namespace ddplaunch {
namespace {

using Steady = std::chrono::steady_clock;

// A blocking loopback connection to `port`.
posix::Fd dial(int port) {
  auto fd = posix::start_connect("127.0.0.1", port);
  EXPECT_TRUE(fd);
  pollfd p{fd->get(), POLLOUT, 0};
  ::poll(&p, 1, 5000);
  EXPECT_EQ(posix::connect_error(fd->get()), 0);
  return std::move(*fd);
}

// Pumps the relay until `done` holds (or 10 s pass), moving bytes between
// the test's own non-blocking sockets with `step`.
bool pump_until(
    PmixRelay& relay, const std::function<bool()>& done,
    const std::function<void()>& step = [] {}) {
  const auto deadline = Steady::now() + std::chrono::seconds(10);
  while (!done()) {
    if (Steady::now() > deadline) {
      return false;
    }
    pollfd p{relay.fd(), POLLIN, 0};
    ::poll(&p, 1, 10);
    relay.pump();
    step();
  }
  return true;
}

// Everything readable from `fd` now, appended to `into`; true at EOF.
bool drain(int fd, std::string& into) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      into.append(buffer, static_cast<size_t>(n));
      continue;
    }
    return n == 0;
  }
}

// Writes what it can of `data` from `sent` on.
void feed(int fd, const std::string& data, size_t& sent) {
  while (sent < data.size()) {
    const ssize_t n =
        ::send(fd, data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) {
      return;
    }
    sent += static_cast<size_t>(n);
  }
}

std::string pattern(size_t size, char seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) {
    s[i] = static_cast<char>(seed + static_cast<char>(i * 31 % 251));
  }
  return s;
}

TEST(PmixRelay, AClientsFirstBytesWaitForTheServerThenFlowBothWays) {
  PmixRelay relay;
  int first_clients = 0;
  relay.on_first_client([&] { ++first_clients; });
  posix::Fd server_listener = posix::listen_tcp("127.0.0.1", 0);

  posix::Fd client = dial(relay.port());
  ASSERT_TRUE(posix::write_all(client.get(), "hello server"));
  ASSERT_TRUE(pump_until(relay, [&] { return first_clients == 1 && relay.clients() == 1; }));

  relay.set_server("127.0.0.1", posix::local_port(server_listener.get()));
  posix::Fd server;
  std::string at_server;
  ASSERT_TRUE(pump_until(
      relay, [&] { return at_server == "hello server"; },
      [&] {
        if (!server) {
          server = posix::Fd(::accept4(server_listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        }
        if (server) {
          drain(server.get(), at_server);
        }
      }));
  ASSERT_TRUE(posix::write_all(server.get(), "hello client"));
  std::string at_client;
  ASSERT_TRUE(pump_until(
      relay, [&] { return at_client == "hello client"; }, [&] { drain(client.get(), at_client); }));

  // A later client is connected at once; the first callback is not called again.
  posix::Fd second = dial(relay.port());
  ASSERT_TRUE(pump_until(relay, [&] { return relay.clients() == 2; }));
  EXPECT_EQ(first_clients, 1);

  // The client's end reaches the server; the server's end closes the pair.
  ::shutdown(client.get(), SHUT_WR);
  bool server_eof = false;
  ASSERT_TRUE(pump_until(
      relay, [&] { return server_eof; }, [&] { server_eof = drain(server.get(), at_server); }));
  server.close();
  bool client_eof = false;
  ASSERT_TRUE(pump_until(
      relay, [&] { return client_eof && relay.clients() == 1; },
      [&] { client_eof = drain(client.get(), at_client); }));
}

TEST(PmixRelay, LargeTransfersBothWaysArriveWhole) {
  PmixRelay relay;
  posix::Fd server_listener = posix::listen_tcp("127.0.0.1", 0);
  relay.set_server("127.0.0.1", posix::local_port(server_listener.get()));
  posix::Fd client = dial(relay.port());
  posix::Fd server;
  // More than the relay buffers each way: it must stop reading and resume.
  const std::string up = pattern(3 * PmixRelay::k_buffer_bytes + 12345, 'a');
  const std::string down = pattern(5 * PmixRelay::k_buffer_bytes + 777, 'k');
  size_t up_sent = 0;
  size_t down_sent = 0;
  std::string at_server;
  std::string at_client;
  posix::set_nonblocking(client.get());
  ASSERT_TRUE(pump_until(
      relay, [&] { return at_server.size() == up.size() && at_client.size() == down.size(); },
      [&] {
        if (!server) {
          server = posix::Fd(
              ::accept4(server_listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        }
        feed(client.get(), up, up_sent);
        drain(client.get(), at_client);
        if (server) {
          feed(server.get(), down, down_sent);
          drain(server.get(), at_server);
        }
      }));
  EXPECT_TRUE(at_server == up);
  EXPECT_TRUE(at_client == down);
}

TEST(PmixRelay, ClientsAreClosedWhenNoServerWillCome) {
  PmixRelay relay;
  posix::Fd client = dial(relay.port());
  ASSERT_TRUE(pump_until(relay, [&] { return relay.clients() == 1; }));
  relay.refuse_clients();
  EXPECT_EQ(relay.clients(), 0u);
  std::string got;
  bool eof = false;
  ASSERT_TRUE(pump_until(
      relay, [&] { return eof; }, [&] { eof = drain(client.get(), got); }));
  // A later one too.
  posix::Fd later = dial(relay.port());
  eof = false;
  ASSERT_TRUE(pump_until(
      relay, [&] { return eof; }, [&] { eof = drain(later.get(), got); }));
  EXPECT_EQ(relay.clients(), 0u);
}

TEST(PmixRelay, AServerThatCannotBeReachedClosesItsClients) {
  PmixRelay relay;
  int port = 0;
  {
    posix::Fd gone = posix::listen_tcp("127.0.0.1", 0);
    port = posix::local_port(gone.get());
  }
  posix::Fd client = dial(relay.port());
  ASSERT_TRUE(posix::write_all(client.get(), "x"));
  ASSERT_TRUE(pump_until(relay, [&] { return relay.clients() == 1; }));
  relay.set_server("127.0.0.1", port);  // refused
  std::string got;
  bool eof = false;
  ASSERT_TRUE(pump_until(
      relay, [&] { return eof && relay.clients() == 0; },
      [&] { eof = drain(client.get(), got) || !got.empty(); }));
}

}  // namespace
}  // namespace ddplaunch
