#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <future>
#include <thread>

#include "ddplaunch/store_client.hpp"
#include "posix/fd.hpp"
#include "posix/library.hpp"
#include "posix/net.hpp"
#include "store/async_client.hpp"
#include "store/auth.hpp"
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
  return protocol::Encoder().u8(0).u32(magic).u16(version).bytes(std::string(32, 'n')).finish();
}

// What follows the first frame (HELLO's answer) of `replies`.
std::string after_hello(const std::string& replies) {
  auto len = protocol::complete_frame(replies);
  return len ? replies.substr(4 + *len) : std::string();
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
  EXPECT_EQ(c.keys(), (std::vector<std::string>{"cas", "n"})) << "every key, sorted";
  EXPECT_EQ(c.remove(std::vector<std::string>{}), 0u);
  std::vector<std::string> many;
  for (int i = 0; i < 20'000; ++i) {  // more than one socket buffer of requests
    many.push_back("k/" + std::to_string(i));
    if (i % 2 == 0) {
      c.set(many.back(), "v");
    }
  }
  many.push_back("n");
  EXPECT_EQ(c.remove(many), 10'001u) << "the even ones and n existed";
  EXPECT_EQ(c.keys(), (std::vector<std::string>{"cas"}));
}

TEST(Store, AWorkersPrefixKeepsItsKeysApartFromTheLaunchers) {
  StoreServer server("127.0.0.1", 0);
  auto launcher = client(server);
  launcher.set("rdzv/plan", "the plan");
  auto worker = client(server);
  worker.set_prefix("user/");
  worker.set("rdzv/plan", "junk");
  worker.set("b", "2");
  EXPECT_EQ(launcher.get("rdzv/plan"), "the plan");
  EXPECT_EQ(launcher.get("user/rdzv/plan"), "junk");
  EXPECT_EQ(worker.keys(), (std::vector<std::string>{"b", "rdzv/plan"}));
  EXPECT_EQ(worker.num_keys(), 2u) << "its own keys only";
  EXPECT_TRUE(worker.wait({"b"}, std::chrono::milliseconds(100)));
  EXPECT_FALSE(worker.check({"user/b"}));
  EXPECT_EQ(worker.multi_get({"b"})[0], "2");
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

TEST(Store, AConnectionsLastWordIsSetWhenItCloses) {
  StoreServer server("127.0.0.1", 0);
  auto watcher = client(server);
  {
    auto agent = client(server);
    agent.on_close("job/0/stop", "lost");
    agent.on_close("job/0/other", "replaced");  // one per connection: the last one counts
    agent.set("k", "v");
    EXPECT_FALSE(watcher.get("job/0/other", Ms(20))) << "not while it is open";
  }  // closed (as a killed process's socket is)
  EXPECT_EQ(watcher.get("job/0/other", 30s), "replaced");
  EXPECT_FALSE(watcher.check({"job/0/stop"})) << "replaced by the later one";
  // Present already: the last word is not written over it (the job's own
  // verdict wins over "lost" when a node exits after it).
  watcher.set("job/1/stop", "success");
  {
    auto agent = client(server);
    agent.on_close("job/1/stop", "lost");
  }
  {
    auto later = client(server);  // closed after the first: usually handled after it too
    later.on_close("job/1/seen", "closed");
  }
  EXPECT_EQ(watcher.get("job/1/seen", 30s), "closed");
  EXPECT_EQ(watcher.get("job/1/stop"), "success");
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

// Reads the error reply the server sends before closing: in HELLO's place
// (no id), or after it (`with_id`: the id of the request it answers).
std::string error_message(const std::string& reply, bool with_id = false) {
  auto len = protocol::complete_frame(reply);
  EXPECT_TRUE(len) << "an error reply, not a dropped socket";
  if (!len) {
    return "";
  }
  const auto r = protocol::parse_reply(std::string_view(reply).substr(4, *len), with_id);
  EXPECT_EQ(r.status, protocol::Status::k_error);
  return protocol::error_message(r);
}

// The error that follows HELLO's answer.
std::string error_after_hello(const std::string& replies) {
  return error_message(after_hello(replies), true);
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
    // the key's length lies
    r.send_bytes(hello() + protocol::Encoder().u8(1).u32(7).u32(100000).finish());
    std::string reply = r.read_all();
    EXPECT_NE(error_after_hello(reply).find("exceeds the limit"), std::string::npos);
  }
  {
    Raw r(server.port());
    r.send_bytes(hello() + protocol::Encoder().u8(77).finish());
    EXPECT_NE(error_after_hello(r.read_all()).find("unknown operation"), std::string::npos);
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
    r.send_bytes(hello() + protocol::request::get("never", 0));
  }  // a parked GET whose client disappears
  EXPECT_EQ(good.get("k"), "v");
  good.set("never", "now");
  EXPECT_EQ(good.num_keys(), 2u);
}

StoreOptions with_token(const std::string& token) {
  StoreOptions o;
  o.token = token;
  return o;
}

std::string failure_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const StoreError& e) {
    return e.what();
  }
  return "";
}

TEST(StoreTrust, TheJobsTokenAdmitsItsNodesOnly) {
  StoreServer server("127.0.0.1", 0, with_token("s3cret"));
  StoreClient good("127.0.0.1", server.port(), 5s, 30s, "s3cret");
  good.set("job/stop", "");
  EXPECT_EQ(good.get("job/stop"), "");
  auto wrong = failure_of([&] { StoreClient("127.0.0.1", server.port(), 5s, 30s, "guess"); });
  EXPECT_NE(wrong.find("does not know this job's token"), std::string::npos) << wrong;
  auto none = failure_of([&] { StoreClient("127.0.0.1", server.port(), 5s, 30s).set("x", "y"); });
  EXPECT_NE(none.find("admits only its job's nodes"), std::string::npos) << none;
  // A raw client that skips AUTH gets nothing done.
  Raw r(server.port());
  r.send_bytes(hello() + protocol::request::set("job/stop", "forged"));
  EXPECT_NE(error_after_hello(r.read_all()).find("admits only the job's nodes"), std::string::npos);
  EXPECT_EQ(good.get("job/stop"), "") << "nothing forged reached the store";
  EXPECT_EQ(good.num_keys(), 1u);
  // A node with a token meeting a store without one is told so.
  StoreServer open_store("127.0.0.1", 0);
  auto mismatch =
      failure_of([&] { StoreClient("127.0.0.1", open_store.port(), 5s, 30s, "s3cret"); });
  EXPECT_NE(mismatch.find("the store does not check one"), std::string::npos) << mismatch;
}

// libcrypto is loaded at the first authentication; where a library cannot
// be loaded the message names the Debian package that installs it.
TEST(StoreTrust, AMissingLibraryNamesThePackageToInstall) {
  std::string why;
  EXPECT_EQ(posix::open_library("libddplaunch-nothing.so.9", "ddplaunch-nothing", why), nullptr);
  EXPECT_NE(why.find("cannot load libddplaunch-nothing.so.9 (install Debian's ddplaunch-nothing)"),
            std::string::npos)
      << why;
  why.clear();
  EXPECT_NE(posix::open_library("libcrypto.so.3", "libssl3", why), nullptr) << why;
}

// The session's keys, tags and proofs are RFC 5869's HKDF and RFC 2104's
// HMAC, byte for byte (the values from Python's hmac and hashlib): a node
// with libcrypto 1.1 and one with libcrypto 3 in one job agree.
TEST(StoreTrust, TheSessionsKeysAndTagsAreTheStandardOnes) {
  auto hex = [](std::string_view bytes) {
    static constexpr char k_digits[] = "0123456789abcdef";
    std::string out;
    for (const unsigned char c : bytes) {
      out += k_digits[c >> 4];
      out += k_digits[c & 15];
    }
    return out;
  };
  const auth::SessionKeys keys = auth::session_keys("credential", "client-nonce", "server-nonce");
  EXPECT_EQ(hex(keys.client_to_server),
            "698350cfb024c199449fad34ccfd50c321452318348a354a75f004f164b7d886");
  EXPECT_EQ(hex(keys.server_to_client),
            "3ce5bcf5e2968b5a490d0ba6faebe0916cbbd763a2e4db56ba298747bf6ce82d");
  auth::FrameMac mac(keys.client_to_server);
  std::string sealed;
  mac.seal(std::string("\0\0\0\3abc\0\0\0\5hello", 16), sealed);
  EXPECT_EQ(hex(sealed), hex(std::string("\0\0\0\x13"
                                         "abc",
                                         7)) +
                             "ed505504fd0018d84c6f9e031b8dbd52" +
                             hex(std::string("\0\0\0\x15"
                                             "hello",
                                             9)) +
                             "166a654741d0cf3321d78bd4c9e0de63");
  EXPECT_EQ(hex(auth::server_proof("s3cret", "cn", "sn")),
            "e27a400ad1fc81a5d1cd5e4dd8524fbe429fc87e2ec1f6e39651bba5bea32306");
}

// The workers' credential reaches the workers' keys and reads the job's
// topology and verdicts; it cannot forge a verdict, join as a node or list
// the launcher's keys.
TEST(StoreTrust, TheWorkersCredentialReachesOnlyTheWorkersKeys) {
  StoreOptions o = with_token("s3cret");
  o.worker_token = auth::worker_token("s3cret");
  StoreServer server("127.0.0.1", 0, o);
  StoreClient agent("127.0.0.1", server.port(), 5s, 30s, "s3cret");
  agent.set("rdzv/node/0", "{}");
  agent.set("job/0/stop", "{}");
  auto worker = [&] { return StoreClient("127.0.0.1", server.port(), 5s, 30s, o.worker_token); };
  StoreClient w = worker();
  w.set("user/x", "1");
  EXPECT_EQ(w.add("user/n", 2), 2);
  EXPECT_EQ(w.get("job/0/stop"), "{}") << "a verdict may be read";
  EXPECT_FALSE(w.check({"rdzv/plan"})) << "the topology may be read";
  const struct {
    std::function<void(StoreClient&)> call;
    const char* refused;
  } cases[] = {
      {[](StoreClient& c) { c.set("job/0/stop", "forged"); }, "may not write job/0/stop"},
      {[](StoreClient& c) { c.set("rdzv/plan/99", "{}"); }, "may not write rdzv/plan/99"},
      {[](StoreClient& c) { c.add("rdzv/arrivals", 1); }, "may not write rdzv/arrivals"},
      {[](StoreClient& c) { (void)c.get("rdzv/node/0"); }, "may not read rdzv/node/0"},
      {[](StoreClient& c) { (void)c.keys(); }, "may not list keys under"},
  };
  for (const auto& k : cases) {
    StoreClient c = worker();
    const std::string why = failure_of([&] { k.call(c); });
    EXPECT_NE(why.find(k.refused), std::string::npos) << why;
  }
  EXPECT_EQ(agent.get("job/0/stop"), "{}") << "nothing forged reached the store";
}

TEST(StoreTrust, AProgramThatIsNotAStoreIsNamed) {
  // Something else holds the port: it greets with its own banner.
  posix::Fd listener = posix::listen_tcp("127.0.0.1", 0);
  const int port = posix::local_port(listener.get());
  std::thread other([&] {
    pollfd p{listener.get(), POLLIN, 0};
    poll(&p, 1, 5000);
    int fd = accept(listener.get(), nullptr, nullptr);
    const char banner[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
    (void)!::send(fd, banner, sizeof(banner) - 1, 0);
    char buf[256];
    (void)!recv(fd, buf, sizeof(buf), 0);
    close(fd);
  });
  auto why = failure_of([&] { StoreClient("127.0.0.1", port, 5s, 5s); });
  other.join();
  EXPECT_NE(why.find("not a ddplaunch store"), std::string::npos) << why;
  EXPECT_NE(why.find("port " + std::to_string(port)), std::string::npos) << why;
}

TEST(StoreTrust, AddOverflowIsAnErrorNotACrash) {
  StoreServer server("127.0.0.1", 0);
  auto c = client(server);
  c.set("n", "9223372036854775807");
  auto why = failure_of([&] { c.add("n", 1); });
  EXPECT_NE(why.find("overflows"), std::string::npos) << why;
  EXPECT_EQ(client(server).get("n"), "9223372036854775807");
}

TEST(StoreTrust, HalfAFrameOrNoHandshakeIsCutOff) {
  StoreOptions o;
  o.handshake_timeout = 200ms;
  StoreServer server("127.0.0.1", 0, o);
  Raw silent(server.port());  // connects and says nothing
  Raw half(server.port());
  half.send_bytes(hello() + std::string("\0\0\0\x40garbage", 11));  // and never the rest
  EXPECT_EQ(silent.read_all(), "") << "closed, not held forever";
  half.read_all();
  EXPECT_EQ(client(server).num_keys(), 0u) << "the store still serves";
}

TEST(StoreTrust, AClientThatNeverReadsIsCutOffAndCostsBoundedMemory) {
  StoreOptions o;
  o.stall_timeout = 300ms;
  StoreServer server("127.0.0.1", 0, o);
  auto c = client(server);
  c.set("big", std::string(protocol::k_max_value, 'x'));
  Raw greedy(server.port());
  int small = 4096;
  setsockopt(greedy.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  std::string requests = hello();
  for (int i = 0; i < 2000; ++i) {  // 2000 MiB of replies asked for with ~30 KiB
    requests += protocol::request::get("big", 0);
  }
  greedy.send_bytes(requests);
  EXPECT_EQ(c.get("big")->size(), protocol::k_max_value) << "others are still served";
  // Cut off: the server resets the connection (it never read the rest).
  pollfd p{greedy.fd, 0, 0};
  ASSERT_EQ(poll(&p, 1, 10'000), 1) << "still connected after 10 s";
  EXPECT_NE(p.revents & (POLLHUP | POLLERR), 0);
}

// Requests held back by unread replies go on once the replies are sent,
// even when one flush sends them all and nothing more arrives: the client
// waits for its answers and sends nothing else (16,384 simulated nodes hung
// this way, node 0 and the nodes all idle).
TEST(Store, RequestsHeldBackByUnreadRepliesGoOnWhenTheRepliesAreAllSent) {
  StoreOptions o;
  o.out_high_water = 4096;
  StoreServer server("127.0.0.1", 0, o);
  auto c = client(server);
  c.set("big", std::string(8192, 'x'));
  Raw pipelining(server.port());
  std::string requests = hello();
  for (uint32_t id = 1; id <= 3; ++id) {
    std::string get = protocol::request::get("big", 0);
    protocol::set_request_id(get, id);
    requests += get;
  }
  pipelining.send_bytes(requests);
  std::string replies;
  char buf[65536];
  pollfd p{pipelining.fd, POLLIN, 0};
  auto frames = [&replies] {
    std::string rest = after_hello(replies);
    int n = 0;
    while (auto len = protocol::complete_frame(rest)) {
      rest.erase(0, 4 + *len);
      ++n;
    }
    return n;
  };
  while (frames() < 3 && poll(&p, 1, 10'000) == 1) {
    const ssize_t n = recv(pipelining.fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      break;
    }
    replies.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(frames(), 3) << "a GET held back behind the first reply was never answered";
}

TEST(StoreTrust, TooManyClientsAreToldSo) {
  StoreOptions o;
  o.max_clients = 4;
  StoreServer server("127.0.0.1", 0, o);
  std::vector<StoreClient> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(client(server));
  }
  // One more is told BUSY and tries again until its deadline...
  auto why = failure_of([&] { StoreClient("127.0.0.1", server.port(), 300ms); });
  EXPECT_NE(why.find("refused this node until its deadline"), std::string::npos) << why;
  EXPECT_NE(why.find("--rdzv-max-clients"), std::string::npos) << why;
  // ... so it gets in once a slot frees.
  auto waiting = std::async(std::launch::async, [&] {
    StoreClient c("127.0.0.1", server.port(), 60s);
    c.ping();
  });
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout) << "no slot yet";
  held.pop_back();
  EXPECT_NO_THROW(waiting.get());
}

// Out of fds, a pending connection keeps the listener readable: the server
// must back off, not spin on accept(). The server runs in a child whose fds
// are all taken; this process connects to it.
TEST(StoreTrust, RunningOutOfFdsDoesNotSpin) {
  int to_child[2];
  int to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit low = {64, 64};
    setrlimit(RLIMIT_NOFILE, &low);
    StoreServer server("127.0.0.1", 0);
    std::vector<int> taken;
    for (int fd; (fd = dup(0)) >= 0;) {
      taken.push_back(fd);
    }
    const int port = server.port();
    char byte = 0;
    (void)!write(to_parent[1], &port, sizeof(port));
    (void)!read(to_child[0], &byte, 1);  // the clients are queued now
    rusage before = {};
    getrusage(RUSAGE_SELF, &before);
    std::this_thread::sleep_for(1s);
    rusage after = {};
    getrusage(RUSAGE_SELF, &after);
    auto cpu_ms = [](const rusage& r) {
      return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000 +
             (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1000;
    };
    byte = cpu_ms(after) - cpu_ms(before) < 300 ? 'q' : 's';  // quiet, or spinning
    for (int fd : taken) {
      close(fd);  // fds come back: the queued clients can be served
    }
    (void)!write(to_parent[1], &byte, 1);
    (void)!read(to_child[0], &byte, 1);
    _exit(0);
  }
  int port = 0;
  ASSERT_EQ(read(to_parent[0], &port, sizeof(port)), ssize_t(sizeof(port)));
  std::vector<std::unique_ptr<Raw>> pending;
  for (int i = 0; i < 4; ++i) {
    pending.push_back(std::make_unique<Raw>(port));  // queued: the server has no fd to take them
  }
  char verdict = 0;
  ASSERT_EQ(write(to_child[1], "c", 1), 1);
  ASSERT_EQ(read(to_parent[0], &verdict, 1), 1);
  EXPECT_EQ(verdict, 'q') << "the server spun on accept() while out of fds";
  pending.back()->send_bytes(hello());
  pollfd p{pending.back()->fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 10'000), 1) << "the queued client was never served";
  ASSERT_EQ(write(to_child[1], "d", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) {
    close(fd);
  }
}

TEST(StoreTrust, MultiGetRepliesAreBounded) {
  StoreServer server("127.0.0.1", 0);
  auto c = client(server);
  c.set("v", std::string(protocol::k_max_value, 'v'));
  std::vector<std::string> keys(40, "v");  // 40 MiB of reply
  auto why = failure_of([&] { c.multi_get(keys); });
  EXPECT_NE(why.find("ask for fewer keys"), std::string::npos) << why;
}

TEST(StoreTrust, AParkedRequestHoldsNothingBackAndOneWriteAnswersThemAll) {
  // Client i parks GET k<i> with SET k<i+1> sent behind it: the SETs are
  // carried out at once (protocol 5: replies by id, in any order), and one
  // SET of k0 then answers the last parked GET.
  StoreServer server("127.0.0.1", 0);
  constexpr int k_links = 1500;
  std::vector<std::unique_ptr<Raw>> links;
  for (int i = 0; i < k_links; ++i) {
    links.push_back(std::make_unique<Raw>(server.port()));
    std::string get = protocol::request::get("k" + std::to_string(i), 0);
    protocol::set_request_id(get, 1);
    std::string set = protocol::request::set("k" + std::to_string(i + 1), "x");
    protocol::set_request_id(set, 2);
    links.back()->send_bytes(hello() + get + set);
  }
  auto c = client(server);
  EXPECT_EQ(c.get("k" + std::to_string(k_links), 10s), "x");
  EXPECT_EQ(c.num_keys(), size_t{k_links}) << "every SET ran, none held behind a parked GET";
  c.set("k0", "x");
  // The first client's GET is answered (id 1), after its SET's reply (id 2).
  std::string replies;
  char buf[256];
  pollfd p{links.front()->fd, POLLIN, 0};
  while (replies.size() < 3 * 9 && poll(&p, 1, 10'000) == 1) {
    const ssize_t n = recv(links.front()->fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      break;
    }
    replies.append(buf, static_cast<size_t>(n));
  }
  std::string rest = after_hello(replies);
  std::vector<uint32_t> ids;
  while (auto len = protocol::complete_frame(rest)) {
    ids.push_back(protocol::parse_reply(std::string_view(rest).substr(4, *len)).id);
    rest.erase(0, 4 + *len);
  }
  EXPECT_EQ(ids, (std::vector<uint32_t>{2, 1}));
}

TEST(Store, RequestsForAnyNumberOfNodesStayWithinTheLimits) {
  // 16,384 nodes' heartbeat keys: more than one request may carry.
  StoreServer server("127.0.0.1", 0);
  auto c = client(server);
  std::vector<std::string> keys;
  for (int n = 0; n < 16384; ++n) {
    keys.push_back("job/heartbeat/" + std::to_string(n));
  }
  for (int n = 0; n < 16384; n += 1000) {
    c.set(keys[static_cast<size_t>(n)], std::to_string(n));
  }
  auto values = c.multi_get(keys);
  ASSERT_EQ(values.size(), keys.size());
  EXPECT_EQ(values[5000], "5000");
  EXPECT_FALSE(values[5001]);
  EXPECT_EQ(values[16000], "16000");
  EXPECT_FALSE(c.wait(keys, 50ms)) << "most are missing";
  for (const auto& k : keys) {
    c.set(k, "1");
  }
  EXPECT_TRUE(c.wait(keys, 10s));
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
  StoreConnection::Failure kind = StoreConnection::Failure::k_unreachable;
  c.set_failure_handler([&](const StoreConnection::Error& e) {
    failure = e.message;
    kind = e.kind;
  });
  c.get("forever", Ms(0), [](std::optional<std::string>) { ADD_FAILURE() << "answered"; });
  drive({&c}, [&] { return c.handshaken(); });
  server.reset();
  drive({&c}, [&] { return !failure.empty(); });
  EXPECT_NE(failure.find("connection closed by the store"), std::string::npos) << failure;
  EXPECT_EQ(kind, StoreConnection::Failure::k_lost) << "after the handshake: lost, typed";
  EXPECT_EQ(c.state(), AsyncClient::State::k_failed);
}

}  // namespace
}  // namespace ddplaunch
