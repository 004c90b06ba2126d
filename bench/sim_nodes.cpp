// Plays nodes 1..N-1 of a job, in one process, over the real protocol,
// against a real `ddplaunch --node-rank 0` that hosts the store. For
// bench/scale.py: rendezvous time, then how long the stop of one simulated
// node takes to reach every other one.
//
//   sim_nodes PORT NNODES NPROC COMMAND [--lean]
//
// Every simulated node runs the agents' own code (one StoreLink each, three
// connections each), unless --lean: then node 1 does, and nodes 2..N-1 each
// hold one connection and make the requests a non-host agent makes to join
// (ADD rdzv/arrivals, SET its join record, GET rdzv/plan, GET its
// rdzv/plan/<arrival>, SET its ack), then park GET job/stop and, once the
// verdict comes, SET their results. No heartbeats: run node 0 with a long
// --heartbeat-timeout. --lean exists because a process may hold only so many
// fds: 16,384 agents hold 49,152 connections to node 0.
//
// COMMAND is node 0's program and arguments joined by spaces, as the agents
// compare them. Node 1 publishes a stop with exit code 7 once every node has
// joined. Prints one line of JSON when done:
//   {"joined_s": ..., "verdict_s": ..., "verdict_code": ..., "finished_s": ...}
// joined_s: from the first join to the last node's plan; verdict_s: from node
// 1's publish_stop to the last node's verdict; finished_s: until every
// simulated node has reported its results.
#include <sys/epoll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "log.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"
#include "rendezvous/store_link.hpp"
#include "store/async_client.hpp"

namespace {

using namespace ddplaunch;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

struct State {
  bool joined = false, verdict = false, finished = false, failed = false;
  int verdict_code = -1;
  std::string error;
};

// A simulated node: its connections as (fd, events, id), driven by the loop.
struct SimNode {
  virtual ~SimNode() = default;
  virtual std::vector<StoreLink::Watch> watches() const = 0;
  virtual void on_ready(int fd, uint32_t events, Clock::time_point now) = 0;
  virtual std::optional<Clock::time_point> deadline() const = 0;
  virtual void on_time(Clock::time_point now) = 0;
  virtual void finish() = 0;
  State state;
  std::vector<StoreLink::Watch> watched;  // what epoll has for it
};

// The agents' own StoreLink.
struct AgentNode : SimNode, JobLink::Listener {
  Config config;
  std::unique_ptr<StoreLink> link;

  AgentNode(int port, int nnodes, int node_rank) {
    config.nnodes = nnodes;
    config.node_rank = node_rank;
    config.master_port = port;
    config.rdzv_timeout_s = 600;
    config.heartbeat_interval_s = 1;
    config.heartbeat_timeout_s = 600;
    link = std::make_unique<StoreLink>(config);
    link->set_listener(*this);
  }
  std::vector<StoreLink::Watch> watches() const override { return link->watches(); }
  void on_ready(int fd, uint32_t events, Clock::time_point now) override {
    link->on_ready(fd, events, now);
  }
  std::optional<Clock::time_point> deadline() const override { return link->deadline(); }
  void on_time(Clock::time_point now) override { link->on_time(now); }
  void finish() override { link->finish({}); }

  void on_joined(const Topology&, int, const RoundStart&) override { state.joined = true; }
  void on_join_failed(int code, const std::string& message) override {
    state.failed = true;
    state.error = std::to_string(code) + ": " + message;
  }
  void on_verdict(const JobVerdict& v) override {
    state.verdict = true;
    state.verdict_code = v.exit_code;
  }
  void on_finished(std::vector<RankOutcome>) override { state.finished = true; }
};

// One connection, the requests of a non-host agent in sequence (--lean).
struct LeanNode : SimNode {
  std::unique_ptr<AsyncClient> c;
  JoinRecord self;
  int node_rank = -1;

  LeanNode(int port, JoinRecord record) : self(std::move(record)) {
    c = std::make_unique<AsyncClient>("127.0.0.1", port, Ms(600'000), Ms(600'000));
    c->set_failure_handler([this](const std::string& why) { fail(why); });
    c->add(keys::k_arrivals, 1, [this](int64_t n) {
      self.arrival = static_cast<int>(n - 1);
      c->set(keys::node(self.arrival), encode_join(self), [] {});
      c->get(keys::k_plan, Ms(0), [this](std::optional<std::string> text) { plan(text); });
    });
  }
  void fail(const std::string& why) {
    state.failed = true;
    state.error = why;
  }
  void plan(const std::optional<std::string>& text) {
    try {
      if (!decode_plan(text.value_or("")).topology) {
        return fail("rendezvous failed: " + text.value_or(""));
      }
    } catch (const RecordError& e) {
      return fail(e.what());
    }
    c->get(keys::plan(self.arrival), Ms(1), [this](std::optional<std::string> mine) {
      try {
        node_rank = decode_assignment(mine.value_or(""));
      } catch (const RecordError& e) {
        return fail(e.what());
      }
      c->set(keys::ack(self.arrival), "1", [] {});
      state.joined = true;
      c->get(keys::stop(0), Ms(0), [this](std::optional<std::string> verdict) {
        try {
          state.verdict_code = decode_verdict(verdict.value_or("")).exit_code;
          state.verdict = true;
        } catch (const RecordError& e) {
          fail(e.what());
        }
      });
    });
  }
  std::vector<StoreLink::Watch> watches() const override {
    if (c->fd() < 0 || c->events() == 0) {
      return {};
    }
    return {{c->fd(), c->events(), static_cast<uint64_t>(c->attempts())}};
  }
  void on_ready(int, uint32_t events, Clock::time_point now) override { c->on_ready(events, now); }
  std::optional<Clock::time_point> deadline() const override { return c->deadline(); }
  void on_time(Clock::time_point now) override { c->on_time(now); }
  void finish() override {
    c->set(keys::result(0, node_rank), encode_outcomes({}), [this] { state.finished = true; });
  }
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: sim_nodes PORT NNODES NPROC COMMAND [--lean]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const int nnodes = std::atoi(argv[2]);
  const int nproc = std::atoi(argv[3]);
  const std::string command = argv[4];
  const bool lean = argc > 5 && std::string(argv[5]) == "--lean";

  log::setup("warn");  // N agents' progress lines would drown the result
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  std::vector<std::unique_ptr<SimNode>> nodes;
  // Keeps epoll in step with one node's connections, touching only what
  // changed; an event's tag is 4 x node index + the connection's slot.
  auto sync = [&](size_t i) {
    SimNode& node = *nodes[i];
    auto now = node.watches();
    const bool same_fds = now.size() == node.watched.size() && [&] {
      for (size_t s = 0; s < now.size(); ++s) {
        if (now[s].fd != node.watched[s].fd || now[s].id != node.watched[s].id) {
          return false;
        }
      }
      return true;
    }();
    if (same_fds) {
      for (size_t s = 0; s < now.size(); ++s) {
        if (now[s].events != node.watched[s].events) {
          epoll_event e{};
          e.events = now[s].events;
          e.data.u64 = 4 * i + s;
          epoll_ctl(ep, EPOLL_CTL_MOD, now[s].fd, &e);
        }
      }
    } else {
      for (const auto& w : node.watched) {
        epoll_ctl(ep, EPOLL_CTL_DEL, w.fd, nullptr);
      }
      for (size_t s = 0; s < now.size(); ++s) {
        epoll_event e{};
        e.events = now[s].events;
        e.data.u64 = 4 * i + s;
        epoll_ctl(ep, EPOLL_CTL_ADD, now[s].fd, &e);
      }
    }
    node.watched = std::move(now);
  };

  std::vector<epoll_event> events(4096);
  auto next_tick = Clock::now();
  // Drives every simulated node until each has `flag`; exits 1 if a node
  // fails. Counts as nodes change, so that a loop turn costs what it touched.
  auto run_until = [&](bool State::*flag) {
    std::vector<char> seen(nodes.size(), 0);
    size_t count = 0;
    auto note = [&](size_t i) {
      if (!seen[i] && nodes[i]->state.*flag) {
        seen[i] = 1;
        ++count;
      }
    };
    for (size_t i = 0; i < nodes.size(); ++i) {
      note(i);
    }
    while (count < nodes.size()) {
      const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 10);
      auto now = Clock::now();
      std::vector<size_t> touched;
      for (int k = 0; k < n; ++k) {
        const auto& ev = events[static_cast<size_t>(k)];
        const size_t i = ev.data.u64 / 4, slot = ev.data.u64 % 4;
        SimNode& node = *nodes[i];
        if (slot < node.watched.size()) {
          node.on_ready(node.watched[slot].fd, ev.events, now);
        }
        touched.push_back(i);
      }
      if (now >= next_tick) {  // timers: retries, heartbeats, overdue replies
        next_tick = now + Ms(20);
        for (size_t i = 0; i < nodes.size(); ++i) {
          if (auto d = nodes[i]->deadline(); d && *d <= now) {
            nodes[i]->on_time(now);
            touched.push_back(i);
          }
        }
      }
      for (size_t i : touched) {
        sync(i);
        note(i);
        if (nodes[i]->state.failed) {
          std::fprintf(stderr, "sim_nodes: a node failed: %s\n", nodes[i]->state.error.c_str());
          std::exit(1);
        }
      }
    }
  };

  const auto start = Clock::now();
  for (int n = 1; n < nnodes; ++n) {
    JoinRecord self;
    self.run_id = "none";
    self.command = command;
    self.nnodes = nnodes;
    self.nproc = nproc;
    self.node_rank = n;
    self.host = "sim" + std::to_string(n);
    self.addr = "127.0.0.1";
    if (lean && n > 1) {
      nodes.push_back(std::make_unique<LeanNode>(port, self));
    } else {
      auto agent = std::make_unique<AgentNode>(port, nnodes, n);
      agent->link->join(self);
      nodes.push_back(std::move(agent));
    }
    sync(nodes.size() - 1);
  }
  run_until(&State::joined);
  const auto joined = Clock::now();

  auto& node1 = static_cast<AgentNode&>(*nodes[0]);
  node1.link->publish_stop(JobVerdict{7, "node 1 (sim1): a simulated failure", std::nullopt, 1});
  sync(0);
  const auto stop_sent = Clock::now();
  run_until(&State::verdict);
  const auto verdict = Clock::now();
  for (size_t i = 0; i < nodes.size(); ++i) {
    nodes[i]->finish();
    sync(i);
  }
  run_until(&State::finished);
  const auto finished = Clock::now();
  std::printf(
      "{\"joined_s\": %.4f, \"verdict_s\": %.4f, \"verdict_code\": %d, \"finished_s\": %.4f}\n",
      seconds(start, joined), seconds(stop_sent, verdict), nodes.back()->state.verdict_code,
      seconds(verdict, finished));
  return 0;
}
