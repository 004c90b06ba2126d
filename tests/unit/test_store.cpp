#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "ddplaunch/store_client.hpp"
#include "store/async_client.hpp"
#include "store/protocol.hpp"
#include "store/server.hpp"

namespace ddplaunch {
namespace {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

StoreClient client(const StoreServer& s) {
  return StoreClient("127.0.0.1", s.port(), 5s);
}

// A raw TCP connection for sending malformed bytes.
struct Raw {
  int fd;
  explicit Raw(int port) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  ~Raw() { close(fd); }
  void send_bytes(const std::string& b) {
    ASSERT_EQ(::send(fd, b.data(), b.size(), 0), ssize_t(b.size()));
  }
  // Reads until EOF; returns everything received.
  std::string read_all() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
};

std::string hello(uint32_t magic = protocol::k_magic, uint16_t version = protocol::k_version) {
  return protocol::Encoder().u8(0).u32(magic).u16(version).finish();
}

TEST(Protocol, RoundTripsBigEndian) {
  std::string frame =
      protocol::Encoder().u8(1).u16(0x0203).u32(0x04050607).i64(-2).bytes("k").finish();
  ASSERT_EQ(frame.substr(0, 4), std::string("\0\0\0\x14", 4));
  EXPECT_EQ(frame[5], '\x02');
  auto len = protocol::complete_frame(frame);
  ASSERT_TRUE(len);
  protocol::Decoder d(std::string_view(frame).substr(4, *len));
  EXPECT_EQ(d.u8(), 1);
  EXPECT_EQ(d.u16(), 0x0203);
  EXPECT_EQ(d.u32(), 0x04050607u);
  EXPECT_EQ(d.i64(), -2);
  EXPECT_EQ(d.bytes(10), "k");
  EXPECT_TRUE(d.done());
  EXPECT_THROW(d.u8(), protocol::ProtocolError);
  EXPECT_FALSE(protocol::complete_frame(frame.substr(0, 7)));
  EXPECT_THROW(protocol::complete_frame(std::string("\x7f\0\0\0", 4)), protocol::ProtocolError);
  const std::string big_frame = protocol::Encoder().bytes(std::string(20, 'x')).finish();
  protocol::Decoder big(std::string_view(big_frame).substr(4));
  EXPECT_THROW(big.bytes(10), protocol::ProtocolError);
}

TEST(Store, BasicOperations) {
  StoreServer server("127.0.0.1", 0);
  auto c = client(server);
  c.set("a", "1");
  EXPECT_EQ(c.get("a"), "1");
  EXPECT_EQ(c.add("n", 5), 5);
  EXPECT_EQ(c.add("n", -2), 3);
  EXPECT_EQ(c.get("n"), "3");
  EXPECT_EQ(c.compare_set("cas", std::nullopt, "first"), "first");
  EXPECT_EQ(c.compare_set("cas", std::nullopt, "second"), "first") << "only the first wins";
  EXPECT_EQ(c.compare_set("cas", std::string("first"), "third"), "third");
  EXPECT_EQ(c.compare_set("cas", std::string("nope"), "x"), "third");
  EXPECT_TRUE(c.check({"a", "n"}));
  EXPECT_FALSE(c.check({"a", "missing"}));
  EXPECT_EQ(c.num_keys(), 3u);
  auto values = c.multi_get({"a", "missing"});
  EXPECT_EQ(values[0], "1");
  EXPECT_FALSE(values[1]);
  EXPECT_TRUE(c.remove("a"));
  EXPECT_FALSE(c.remove("a"));
  EXPECT_EQ(c.num_keys(), 2u);
  c.ping();
}

TEST(Store, BlockingGetAndWaitAreAnsweredBySet) {
  StoreServer server("127.0.0.1", 0);
  auto waiter = client(server);
  auto setter = client(server);
  std::thread t([&] {
    EXPECT_TRUE(waiter.wait({"x", "y"}, 30s));
    EXPECT_EQ(waiter.get("y", 30s), "2");
  });
  setter.set("x", "1");
  setter.set("y", "2");
  t.join();
}

TEST(Store, TimeoutsAreReported) {
  StoreServer server("127.0.0.1", 0);
  auto c = client(server);
  EXPECT_FALSE(c.get("never", Ms(50)));
  EXPECT_FALSE(c.wait({"never"}, Ms(50)));
  c.set("k", "v");  // the connection still works after a timeout
  EXPECT_EQ(c.get("k", Ms(50)), "v");
}

// Drives non-blocking clients with poll() until `done` says so (or 30 s pass).
void drive(const std::vector<AsyncClient*>& clients, const std::function<bool()>& done) {
  const auto end = AsyncClient::Clock::now() + 30s;
  while (!done() && AsyncClient::Clock::now() < end) {
    std::vector<pollfd> fds;
    std::vector<AsyncClient*> owners;
    for (auto* c : clients) {
      if (c->fd() >= 0 && c->events() != 0) {
        const uint32_t e = c->events();
        fds.push_back(
            {c->fd(),
             static_cast<short>(((e & EPOLLIN) ? POLLIN : 0) | ((e & EPOLLOUT) ? POLLOUT : 0)), 0});
        owners.push_back(c);
      }
    }
    poll(fds.data(), fds.size(), 20);
    const auto now = AsyncClient::Clock::now();
    for (size_t i = 0; i < fds.size(); ++i) {
      const short r = fds[i].revents;
      if (r != 0) {
        owners[i]->on_ready(((r & POLLIN) ? EPOLLIN : 0u) | ((r & POLLOUT) ? EPOLLOUT : 0u) |
                                ((r & POLLHUP) ? EPOLLHUP : 0u) | ((r & POLLERR) ? EPOLLERR : 0u),
                            now);
      }
    }
    for (auto* c : clients) {
      c->on_time(now);
    }
  }
}

TEST(Store, AThousandParkedClientsAreAllWoken) {
  rlimit lim;
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 2200) {
    GTEST_SKIP() << "needs 2200 file descriptors";
  }
  StoreServer server("127.0.0.1", 0);
  std::vector<std::unique_ptr<AsyncClient>> clients;
  std::vector<AsyncClient*> all;
  int woken = 0;
  int added = 0;
  for (int i = 0; i < 1000; ++i) {
    clients.push_back(std::make_unique<AsyncClient>("127.0.0.1", server.port(), 10s, 30s));
    all.push_back(clients.back().get());
    clients.back()->get("go", Ms(0), [&](std::optional<std::string> v) {
      EXPECT_EQ(v, "now");
      ++woken;
    });
  }
  auto c = client(server);
  // Every client is connected (its GET sent) before the key is set.
  drive(all, [&] {
    return std::all_of(all.begin(), all.end(),
                       [](auto* a) { return a->state() == AsyncClient::State::k_ready; });
  });
  EXPECT_EQ(c.add("count", 1), 1);
  c.set("go", "now");
  drive(all, [&] { return woken == 1000; });
  EXPECT_EQ(woken, 1000);
  // And they all still work.
  for (auto* a : all) {
    a->add("count", 1, [&](int64_t) { ++added; });
  }
  drive(all, [&] { return added == 1000; });
  EXPECT_EQ(c.get("count"), "1001");
}

TEST(Store, ConcurrentAddsFromManyThreadsAreAtomic) {
  StoreServer server("127.0.0.1", 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      auto c = client(server);
      for (int i = 0; i < 200; ++i) {
        c.add("n", 1);
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(client(server).get("n"), "3200");
}

// Reads the error reply the server sends before closing.
std::string error_message(const std::string& reply) {
  auto len = protocol::complete_frame(reply);
  EXPECT_TRUE(len) << "an error reply, not a dropped socket";
  if (!len) {
    return "";
  }
  protocol::Decoder d(std::string_view(reply).substr(4, *len));
  EXPECT_EQ(d.u8(), static_cast<uint8_t>(protocol::Status::k_error));
  return d.bytes(100000);
}

TEST(Store, BadClientsGetAnErrorAndCostNobodyElse) {
  StoreServer server("127.0.0.1", 0);
  auto good = client(server);
  good.set("k", "v");
  {
    Raw r(server.port());
    r.send_bytes(hello(protocol::k_magic, 99));
    EXPECT_NE(error_message(r.read_all()).find("version mismatch"), std::string::npos);
  }
  {
    Raw r(server.port());
    r.send_bytes(hello(0x12345678));
    EXPECT_NE(error_message(r.read_all()).find("bad magic"), std::string::npos);
  }
  {
    Raw r(server.port());
    r.send_bytes(std::string("\x7f\xff\xff\xff", 4));  // a 2 GiB frame
    EXPECT_NE(error_message(r.read_all()).find("exceeds the limit"), std::string::npos);
  }
  {
    Raw r(server.port());
    r.send_bytes(hello() + protocol::Encoder().u8(1).u32(100000).finish());  // key length lies
    std::string reply = r.read_all();
    EXPECT_NE(error_message(reply.substr(7)).find("exceeds the limit"), std::string::npos);
  }
  {
    Raw r(server.port());
    r.send_bytes(hello() + protocol::Encoder().u8(77).finish());
    EXPECT_NE(error_message(r.read_all().substr(7)).find("unknown operation"), std::string::npos);
  }
  {
    Raw r(server.port());
    r.send_bytes(protocol::Encoder().u8(1).bytes("k").bytes("v").finish());  // no HELLO
    EXPECT_NE(error_message(r.read_all()).find("HELLO"), std::string::npos);
  }
  {
    Raw r(server.port());
    r.send_bytes(hello() + std::string("\0\0\0\x40garbage", 11));  // half a frame, then gone
  }
  {
    Raw r(server.port());
    r.send_bytes(hello() + protocol::Encoder().u8(2).bytes("never").u32(0).finish());
  }  // a parked GET whose client disappears
  EXPECT_EQ(good.get("k"), "v");
  good.set("never", "now");
  EXPECT_EQ(good.num_keys(), 2u);
}

TEST(Store, ClientRetriesUntilTheServerAppears) {
  int port;
  {
    StoreServer probe("127.0.0.1", 0);
    port = probe.port();
  }
  std::optional<StoreServer> server;
  std::thread t([&] {
    StoreClient c("127.0.0.1", port, 20s);
    c.set("late", "yes");
  });
  std::this_thread::sleep_for(100ms);  // the client must be retrying, not failing
  server.emplace("127.0.0.1", port);
  t.join();
  EXPECT_EQ(client(*server).get("late"), "yes");
}

TEST(Store, UnreachableStoreIsAClearError) {
  int port;
  {
    StoreServer probe("127.0.0.1", 0);
    port = probe.port();
  }
  try {
    StoreClient c("127.0.0.1", port, Ms(200));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach the store at 127.0.0.1:"),
              std::string::npos);
  }
}

TEST(Store, StoppedServerIsNoticedByWaitingClients) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0);
  AsyncClient c("127.0.0.1", server->port(), 5s, 5s);
  std::string failure;
  c.set_failure_handler([&](const std::string& why) { failure = why; });
  c.get("forever", Ms(0), [](std::optional<std::string>) { ADD_FAILURE() << "answered"; });
  drive({&c}, [&] { return c.state() == AsyncClient::State::k_ready; });
  server.reset();
  drive({&c}, [&] { return !failure.empty(); });
  EXPECT_NE(failure.find("connection closed by the store"), std::string::npos) << failure;
  EXPECT_EQ(c.state(), AsyncClient::State::k_failed);
}

}  // namespace
}  // namespace ddplaunch
