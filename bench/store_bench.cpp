// Store throughput for bench/run.py: N clients, one thread each, hammer one
// operation on a running store for a fixed time; prints ops per second.
//
//   store_bench serve                      start a StoreServer on 127.0.0.1, port 0;
//                                          print the port, serve until stdin closes
//   store_bench run PORT CLIENTS SECONDS OP    OP: set | get | add
//
// set and get use one key per client (16-byte values); add uses one counter
// shared by every client. Every operation waits for the server's answer.
// With STORE_BENCH_TOKEN set (both sides), the store has that job token:
// every connection authenticates and every frame is sealed.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "ddplaunch/store_client.hpp"
#include "store/server.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::string token() {
  const char* t = std::getenv("STORE_BENCH_TOKEN");
  return t != nullptr ? t : "";
}

int serve() {
  ddplaunch::StoreOptions options;
  options.token = token();
  ddplaunch::StoreServer server("127.0.0.1", 0, options);
  std::printf("%d\n", server.port());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

int run(int port, int clients, double seconds, const std::string& op) {
  if (op != "set" && op != "get" && op != "add") {
    std::fprintf(stderr, "store_bench: unknown op '%s' (set, get or add)\n", op.c_str());
    return 2;
  }
  std::vector<ddplaunch::StoreClient> conns;
  conns.reserve(static_cast<size_t>(clients));
  for (int i = 0; i < clients; ++i) {
    conns.emplace_back("127.0.0.1", port, std::chrono::seconds(10), std::chrono::seconds(30),
                       token());
    conns.back().set("key" + std::to_string(i), std::string(16, 'v'));
  }
  std::atomic<bool> go{false};
  std::atomic<long long> total{0};
  const auto duration = std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      auto& c = conns[static_cast<size_t>(i)];
      const std::string key = "key" + std::to_string(i);
      const std::string value(16, 'w');
      while (!go.load()) {
        std::this_thread::yield();
      }
      const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(duration);
      long long n = 0;
      while (Clock::now() < end) {
        if (op == "set") {
          c.set(key, value);
        } else if (op == "get") {
          c.get(key);
        } else {
          c.add("counter", 1);
        }
        ++n;
      }
      total += n;
    });
  }
  const auto start = Clock::now();
  go = true;
  for (auto& t : threads) {
    t.join();
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%.0f\n", static_cast<double>(total.load()) / elapsed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 2 && std::string(argv[1]) == "serve") {
      return serve();
    }
    if (argc == 6 && std::string(argv[1]) == "run") {
      return run(std::atoi(argv[2]), std::atoi(argv[3]), std::atof(argv[4]), argv[5]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: store_bench serve | store_bench run PORT CLIENTS SECONDS set|get|add\n");
  return 2;
}
