// Plays nodes 1..N-1 of a job, in one process, over the real protocol and
// with the agents' own code (one StoreLink each, three connections each),
// against a real `ddplaunch --node-rank 0` that hosts the store. For
// bench/scale.py: rendezvous time, then (with --fail) how long the stop of
// one simulated node takes to reach every other one.
//
//   sim_nodes PORT NNODES NPROC COMMAND [--fail]
//
// COMMAND is node 0's program and arguments joined by spaces, as the agents
// compare them. Prints one line of JSON when done:
//   {"joined_s": ..., "verdict_s": ..., "verdict_code": ..., "finished_s": ...}
// joined_s: from the first join to the last node's plan; verdict_s: from
// node 1's publish_stop (--fail) or the last success to the last node's
// verdict; finished_s: until every simulated node has reported its results.
#include <sys/epoll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "log.hpp"
#include "rendezvous/store_link.hpp"

namespace {

using namespace ddplaunch;
using Clock = std::chrono::steady_clock;

struct SimNode : JobLink::Listener {
  Config config;
  std::unique_ptr<StoreLink> link;
  std::vector<StoreLink::Watch> watched;
  bool joined = false, verdict = false, finished = false, failed = false;
  int verdict_code = -1;
  std::string error;

  void on_joined(const Topology&, int) override { joined = true; }
  void on_join_failed(int code, const std::string& message) override {
    failed = true;
    error = std::to_string(code) + ": " + message;
  }
  void on_verdict(const JobVerdict& v) override {
    verdict = true;
    verdict_code = v.exit_code;
  }
  void on_finished(std::vector<RankOutcome>) override { finished = true; }
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: sim_nodes PORT NNODES NPROC COMMAND [--fail]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const int nnodes = std::atoi(argv[2]);
  const int nproc = std::atoi(argv[3]);
  const std::string command = argv[4];
  const bool fail = argc > 5 && std::string(argv[5]) == "--fail";

  log::setup("warn");  // N agents' progress lines would drown the result
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  std::vector<std::unique_ptr<SimNode>> nodes;
  for (int n = 1; n < nnodes; ++n) {
    auto node = std::make_unique<SimNode>();
    node->config.nnodes = nnodes;
    node->config.node_rank = n;
    node->config.master_port = port;
    node->config.rdzv_timeout_s = 600;
    node->config.heartbeat_interval_s = 1;
    node->config.heartbeat_timeout_s = 120;
    node->link = std::make_unique<StoreLink>(node->config);
    node->link->set_listener(*node);
    nodes.push_back(std::move(node));
  }
  // Keeps epoll in step with one node's connections (they change as it
  // goes); an event's tag is 4 x node index + the connection's slot.
  auto sync = [&](size_t i) {
    SimNode& node = *nodes[i];
    auto now = node.link->watches();
    for (const auto& w : node.watched) {
      epoll_ctl(ep, EPOLL_CTL_DEL, w.fd, nullptr);
    }
    for (size_t slot = 0; slot < now.size(); ++slot) {
      epoll_event e{};
      e.events = now[slot].events;
      e.data.u64 = 4 * i + slot;
      epoll_ctl(ep, EPOLL_CTL_ADD, now[slot].fd, &e);
    }
    node.watched = std::move(now);
  };

  std::vector<epoll_event> events(4096);
  auto next_tick = Clock::now();
  // Drives every simulated node until `done()`; exits 1 if a node fails.
  auto run_until = [&](auto done) {
    while (!done()) {
      const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 10);
      auto now = Clock::now();
      std::vector<size_t> touched;
      for (int k = 0; k < n; ++k) {
        const auto& ev = events[static_cast<size_t>(k)];
        const size_t i = ev.data.u64 / 4, slot = ev.data.u64 % 4;
        SimNode& node = *nodes[i];
        if (slot < node.watched.size()) {
          node.link->on_ready(node.watched[slot].fd, ev.events, now);
        }
        touched.push_back(i);
      }
      if (now >= next_tick) {
        next_tick = now + std::chrono::milliseconds(20);
        for (size_t i = 0; i < nodes.size(); ++i) {
          nodes[i]->link->on_time(now);
          touched.push_back(i);
        }
      }
      for (size_t i : touched) {
        sync(i);
      }
      for (const auto& node : nodes) {
        if (node->failed) {
          std::fprintf(stderr, "sim_nodes: a node failed: %s\n", node->error.c_str());
          std::exit(1);
        }
      }
    }
  };
  auto all = [&](bool SimNode::*flag) {
    return [&nodes, flag] {
      for (const auto& node : nodes) {
        if (!(node.get()->*flag)) {
          return false;
        }
      }
      return true;
    };
  };

  const auto start = Clock::now();
  for (size_t i = 0; i < nodes.size(); ++i) {
    JoinRecord self;
    self.run_id = "none";
    self.command = command;
    self.nnodes = nnodes;
    self.nproc = nproc;
    self.node_rank = static_cast<int>(i) + 1;
    self.host = "sim" + std::to_string(i + 1);
    self.addr = "127.0.0.1";
    nodes[i]->link->join(self);
    sync(i);
  }
  run_until(all(&SimNode::joined));
  const auto joined = Clock::now();

  if (fail) {
    nodes[0]->link->publish_stop(
        JobVerdict{7, "node 1 (sim1): a simulated failure", std::nullopt, 1});
  } else {
    for (size_t i = 0; i < nodes.size(); ++i) {
      nodes[i]->link->publish_success();
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    sync(i);
  }
  const auto stop_sent = Clock::now();
  run_until(all(&SimNode::verdict));
  const auto verdict = Clock::now();
  for (size_t i = 0; i < nodes.size(); ++i) {
    nodes[i]->link->finish({});
    sync(i);
  }
  run_until(all(&SimNode::finished));
  const auto finished = Clock::now();
  std::printf(
      "{\"joined_s\": %.4f, \"verdict_s\": %.4f, \"verdict_code\": %d, \"finished_s\": %.4f}\n",
      seconds(start, joined), seconds(stop_sent, verdict), nodes.back()->verdict_code,
      seconds(verdict, finished));
  return 0;
}
