// Plays nodes 1..N-1 of a job, in one process, over the real protocol,
// against a real `ddplaunch --node-rank 0` that hosts the store. For
// bench/scale.py: rendezvous time, then how long the stop of one simulated
// node takes to reach every other one.
//
//   [SIM_STORE_ADDR=127.0.0.N] sim_nodes PORT NNODES NPROC COMMAND
//
// Every simulated node runs the agents' own code: a MemberLink over one
// AsyncClient, as every agent but node 0 holds; so N nodes hold N
// connections to node 0. Their sockets and probes are registered on one
// posix::EventLoop by the agents' own owners (ClientOnLoop, ReachProbe),
// whose rules keep a closed socket's number, reused by another node's next
// one, from being taken for it; the loop turns here, with every node's
// timers looked at each 20 ms. Run node 0 with a long --heartbeat-timeout: the
// simulated nodes beat only as often as this loop turns.
//
// Each simulated node answers the network preflight as an agent does: it
// opens its probe listener (ReachProbe) and, when node 0's plan asks for the
// preflight (its default), connects to its peers' and reports. A listener
// and its connects' epoll are two more descriptors per node: the nodes past
// what the fd limit allows (beside one connection per node and room for the
// connects in flight) have no probe, as an agent short of descriptors, and
// report that they probed nothing; the others then do not probe them. The
// count is printed ("probes: K of N"). Past the plan's fan-out + 1 nodes the
// reports go up the tree of agents as agents send them: node 0's children
// report on node 0's store for their subtrees, the nodes below them to
// their parents, in memory here.
//
// COMMAND is node 0's program and arguments joined by spaces, as the agents
// compare them. Node 1 publishes a stop with exit code 7 once every node has
// joined. Past the plan's fan-out + 1 nodes the verdict travels the tree of
// agents as agents send it (agent/tree_room.hpp): every node below node 0's
// children takes back its read of it on node 0's store, and node 0's
// children (real connections) hand it to their subtrees in memory: the
// links below them are not simulated. Their heartbeats go up the tree too:
// each counts its start once on node 0's store and beats on its parent's,
// in memory here (SIM_VERDICT_TREE=0: every node reads the verdict, beats
// and reports its preflight on node 0's store; SIM_BEAT_TREE=0: the
// verdict down the tree, the heartbeats to node 0's store, as agents
// before heartbeats went up the tree). Prints one line of JSON when done:
//   {"joined_s": ..., "verdict_s": ..., "verdict_handled_s": ...,
//    "verdict_code": ..., "finished_s": ...}
// joined_s: from the first join to the last node's plan; verdict_s: from node
// 1's publish_stop until the last node reading node 0's store has it (every
// node, or node 0's children); verdict_handled_s: until this one process
// has handled it for every node (each answering node 0's store, as each
// real node does on its own machine); finished_s: from then until every
// simulated node has reported its results.
// With SIM_FENCE_BYTES=B in the environment, once every node has joined they
// also run one PMIx fence among every node, each with a record of B bytes,
// through the tree of agents (SIM_TREE_FANOUT, default 8) as their PMIx
// servers would (mpi/tree_fence.hpp), along the tree's deepest path
// (FencePath), and the line adds "fence_s" (from the first node's entry to
// the last node's combined data), "fence_height" and "fence_links" (the
// real sockets the fence used).
//
// Each connect the agents' code makes here (linked with --wrap=connect)
// leaves from a loopback address of its own, 127.2.x.y, as each real node
// connects from its own address: from one address, 16,383 connections to
// node 0's one port made the kernel search its used ports for a free one
// at each connect, a quarter of the simulator's CPU at 16,384 nodes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/reach_probe.hpp"
#include "agent/stack_capture.hpp"
#include "config/config.hpp"
#include "log.hpp"
#include "mpi/tree_fence.hpp"
#include "posix/event_loop.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"
#include "rendezvous/status_responder.hpp"
#include "rendezvous/store_host.hpp"
#include "rendezvous/store_link.hpp"
#include "status/stacks_codec.hpp"
#include "store/async_client.hpp"
#include "store/client_on_loop.hpp"
#include "store/server.hpp"
#include "topology/tree.hpp"

extern "C" int __real_connect(int fd, const sockaddr* addr, socklen_t len);

// The agents' connects: an IPv4 one to a loopback address leaves from the
// next of 60,000 loopback addresses (its port chosen at the connect, from
// its own address's ports).
extern "C" int __wrap_connect(int fd, const sockaddr* addr, socklen_t len) {
  if (addr != nullptr && addr->sa_family == AF_INET &&
      (ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr) >> 24) == 127) {
    static uint32_t next = 0;
    const uint32_t n = next++ % 60000;
    sockaddr_in self = {};
    self.sin_family = AF_INET;
    self.sin_addr.s_addr = htonl((127u << 24) | (2u << 16) | ((n / 250) << 8) | (n % 250 + 1));
    const int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    (void)bind(fd, reinterpret_cast<const sockaddr*>(&self), sizeof(self));  // else as it was
  }
  return __real_connect(fd, addr, len);
}

namespace {

using namespace ddplaunch;
using Steady = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

struct State {
  bool joined = false, verdict = false, finished = false, failed = false, fenced = false;
  int verdict_code = -1;
  int tree_fanout = 0;  // the plan's
  std::string error;
};

// A parent's store in the tree of agents below node 0's children, in
// memory: every request is answered at once (the preflight report a node
// sends its parent). Never fails.
class ParentInMemory : public StoreConnection {
 public:
  void set_failure_handler(FailureHandler) override {}
  bool failed() const override { return false; }
  const Error& last_error() const override { return m_error; }
  bool connecting() const override { return false; }
  int attempts() const override { return 1; }
  bool idle() const override { return true; }
  void reconnect(Duration) override {}
  void request(std::string, Duration, Callback callback) override { callback(protocol::Reply{}); }

 private:
  Error m_error;
};
ParentInMemory g_parent_in_memory;

// One simulated agent: its connection and its link, as launch.cpp builds them.
struct AgentNode : JobLink::Listener {
  Config config;
  SystemClock clock;
  std::unique_ptr<AsyncClient> store;
  std::unique_ptr<ClientOnLoop> on_loop;  // its socket on the loop
  std::unique_ptr<StoreLink> link;
  ReachProbe probe;  // the network preflight's listener and connects, on the loop
  int probe_port = 0;
  State state;
  // A child of node 0 in the tree of agents: the nodes below it, to which it
  // hands the verdict in memory (as its agent, and theirs, would through
  // the interior nodes' stores), once every child of node 0 has it.
  std::vector<AgentNode*> below;
  bool is_below = false;  // a node below node 0's children
  std::optional<Steady::time_point> verdict_at;
  std::string verdict_text;

  AgentNode(posix::EventLoop& loop, int port, int nnodes, int node_rank, bool with_probe)
      : probe(loop) {
    config.nnodes = nnodes;
    config.node_rank = node_rank;
    config.master_port = port;
    // Each run its own loopback address (bench/scale.py): the connections
    // of the run before wait in TIME_WAIT, and 16,384 more from one address
    // to one port would not find free ports among them.
    if (const char* addr = std::getenv("SIM_STORE_ADDR"); addr != nullptr) {
      config.master_addr = addr;
    }
    config.rdzv_timeout_s = 600;
    config.heartbeat_interval_s = 1;
    config.heartbeat_timeout_s = 600;
    store = std::make_unique<AsyncClient>(config.master_addr, port, Ms(600'000), Ms(600'000));
    on_loop = std::make_unique<ClientOnLoop>(loop, *store);
    link =
        make_store_link(config, StoreAddress{config.master_addr, port, ""}, *store, clock, nullptr);
    link->set_listener(*this);
    if (with_probe) {
      probe_port = probe.listen_on();
      link->set_probe(&probe);
    }
  }
  std::optional<Steady::time_point> deadline() const {
    std::optional<Steady::time_point> first;
    for (auto d : {store->deadline(), link->deadline(), probe.deadline()}) {
      if (d && (!first || *d < *first)) {
        first = d;
      }
    }
    return first;
  }
  void on_time(Steady::time_point now) {
    store->on_time(now);
    probe.on_time(now);
    link->on_time(now);
  }

  // The preflight's reports up the tree (agent/tree_room.hpp), past the
  // plan's fan-out + 1 nodes: node 0's children report on node 0's store,
  // each for its subtree, whose reports it has in memory; a node below them
  // reports to its parent in memory (SIM_VERDICT_TREE=0: every node on
  // node 0's store, as agents before the tree).
  void on_preflight_start(const Topology& topology, int node_rank, const RoundStart&) override {
    const int nnodes = topology.nnodes();
    const int fanout = topology.tree_fanout;
    const char* tree = std::getenv("SIM_VERDICT_TREE");
    if ((tree != nullptr && std::string(tree) == "0") || !tree_has_interior_nodes(nnodes, fanout)) {
      return;
    }
    TreePlace place = tree_place(node_rank, nnodes, fanout);
    place.children.clear();  // in memory
    link->preflight_through_tree(place, tree_height(nnodes, fanout), nullptr);
    if (place.parent > 0) {
      link->report_to(&g_parent_in_memory);
    }
  }
  void on_joined(const Topology& topology, int, const RoundStart&) override {
    state.joined = true;
    state.tree_fanout = topology.tree_fanout;
  }
  void on_join_failed(int code, const std::string& message) override {
    state.failed = true;
    state.error = std::to_string(code) + ": " + message;
  }
  void on_not_needed(int code, const std::string& message) override {
    on_join_failed(code, message);  // a simulated node never waits as a spare
  }
  void on_verdict(const JobVerdict& v) override {
    if (!state.joined) {
      // Node 0 ended the job before this node joined (a rendezvous error,
      // a blocked path): the run has no result.
      on_join_failed(v.exit_code, v.message);
      return;
    }
    state.verdict = true;
    state.verdict_code = v.exit_code;
    verdict_at = Steady::now();
    if (!below.empty()) {
      verdict_text = encode_verdict(v);
    }
  }
  void hand_down() {
    for (AgentNode* node : below) {
      node->link->verdict_read(link->round(), verdict_text);
    }
  }
  void on_finished(std::vector<RankOutcome>) override { state.finished = true; }
};

// A fence among every node through the tree of agents (mpi/tree_fence.hpp),
// played along its deepest path: node 0 (a connection to the real node 0's
// store, as node 0's agent holds one to its own) and, at each level below,
// one interior node with a real store of its own (a StoreServer, as an
// interior agent's) whose children connect to it, down to a leaf. Every
// other child at each level (a sibling of the path) takes part as a leaf
// standing for its whole subtree: its record is its subtree's data, and
// it reads the result once; what happens inside its subtree would happen
// on its own machines at the same time as on the path. So every link the
// path's nodes hold is a real socket: node 0's store serves its F
// children, each interior node's its own F, as in a job.
class FencePath {
 public:
  // Node n >= 1's connection to node 0's store: `member(n)`.
  FencePath(posix::EventLoop& loop, const std::string& addr, int port, int nnodes, int fanout,
            size_t record, std::function<StoreConnection&(int)> member)
      : m_nnodes(nnodes), m_fanout(fanout), m_record(record) {
    m_expected = record * static_cast<size_t>(nnodes);
    m_nodes.push_back(std::make_unique<Node>(tree_place(0, nnodes, fanout)));
    Node* p = m_nodes.back().get();
    p->own_client = connect(loop, addr, port);
    p->down_conn = p->own_client.get();
    while (!p->tp.children.empty()) {
      const int next = p->tp.children.front();  // the largest run: the deepest
      Node* on_path = nullptr;
      for (const int child : p->tp.children) {
        TreePlace place = tree_place(child, nnodes, fanout);
        if (child != next) {
          place.children.clear();  // a leaf standing for its subtree
        }
        m_nodes.push_back(std::make_unique<Node>(place));
        Node& n = *m_nodes.back();
        if (p->tp.node == 0) {
          n.up_conn = &member(child);
        } else {
          n.up_client = connect(loop, "127.0.0.1", p->server->port());
          n.up_conn = n.up_client.get();
        }
        if (child == next && !place.children.empty()) {
          n.server = std::make_unique<StoreServer>("127.0.0.1", 0);
          n.own_client = connect(loop, "127.0.0.1", n.server->port());
          n.down_conn = n.own_client.get();
        }
        on_path = child == next ? &n : on_path;
      }
      p = on_path;
      ++m_height;
    }
  }
  void enter() {
    for (auto& n : m_nodes) {
      n->fence = std::make_unique<TreeFence>(*n);
      const size_t data =
          m_record * static_cast<size_t>(n->tp.children.empty() ? n->tp.subtree : 1);
      Node* node = n.get();
      n->fence->enter("ddplaunch.bench.0.0", "all", n->tp.node, m_nnodes, m_fanout,
                      std::string(data, 'x'), [this, node](TreeFence::Outcome o, std::string d) {
                        node->ended = true;
                        m_failed =
                            m_failed || o != TreeFence::Outcome::k_ok || d.size() != m_expected;
                        ++m_ended;
                      });
    }
  }
  // Its clients' timers (a connect retried, a reply overdue), then their
  // sockets brought up to date, as a turn of the agents' loop does.
  void prepare() {
    const auto now = Steady::now();
    for (auto* owner : m_on_loop) {
      if (auto d = owner->deadline(); d && *d <= now) {
        owner->on_time(now);
      }
      owner->prepare();
    }
  }
  bool finished() const { return m_ended == m_nodes.size(); }
  bool ok() const { return !m_failed; }
  int height() const { return m_height; }
  // The sockets the fence used: each node's to its parent's store, and
  // each store owner's to its own.
  size_t links() const { return m_nodes.size() - 1 + static_cast<size_t>(m_height); }

 private:
  struct Node : TreeLinks {
    explicit Node(TreePlace p) : tp(std::move(p)) {}
    void begin(const std::string&, int, int, int) override {}
    const TreePlace& place() const override { return tp; }
    StoreConnection* down() override { return tp.children.empty() ? nullptr : down_conn; }
    void up(Ready ready) override { ready(up_conn, ""); }
    void on_lost(Lost) override {}
    TreePlace tp;
    std::unique_ptr<StoreServer> server;
    std::unique_ptr<AsyncClient> own_client, up_client;
    StoreConnection* down_conn = nullptr;
    StoreConnection* up_conn = nullptr;
    std::unique_ptr<TreeFence> fence;
    bool ended = false;
  };
  std::unique_ptr<AsyncClient> connect(posix::EventLoop& loop, const std::string& addr, int port) {
    auto client = std::make_unique<AsyncClient>(addr, port, Ms(60'000), Ms(600'000));
    m_clients.push_back(std::make_unique<ClientOnLoop>(loop, *client));
    m_on_loop.push_back(m_clients.back().get());
    return client;
  }

  int m_nnodes, m_fanout;
  size_t m_record, m_expected = 0;
  int m_height = 0;
  std::vector<std::unique_ptr<Node>> m_nodes;
  std::vector<std::unique_ptr<ClientOnLoop>> m_clients;
  std::vector<posix::EventLoop::Owner*> m_on_loop;
  size_t m_ended = 0;
  bool m_failed = false;
};

double seconds(Steady::time_point a, Steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: sim_nodes PORT NNODES NPROC PROGRAM [ARG...]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const int nnodes = std::atoi(argv[2]);
  const int nproc = std::atoi(argv[3]);
  const std::vector<std::string> command(argv + 4, argv + argc);  // node 0's, word by word

  log::setup("error");  // N agents' progress lines would drown the result
  rlimit fds{};
  getrlimit(RLIMIT_NOFILE, &fds);
  const long long spare = static_cast<long long>(fds.rlim_cur) - nnodes - 2048;
  const int probes = static_cast<int>(std::clamp<long long>(spare / 2, 0, nnodes - 1));
  std::fprintf(stderr, "probes: %d of %d\n", probes, nnodes - 1);
  posix::EventLoop loop;
  std::vector<std::unique_ptr<AgentNode>> nodes;
  // Which node each owner on the loop is.
  std::unordered_map<const posix::EventLoop::Owner*, size_t> node_of;
  // Brings the loop up to date with one node's socket and probe, as a turn
  // of the agents' loop does for every owner.
  auto sync = [&](size_t i) {
    nodes[i]->on_loop->prepare();
    nodes[i]->probe.prepare();
  };

  auto next_tick = Steady::now();
  size_t cursor = 0;     // the next node the timers look at
  size_t tick_left = 0;  // nodes this pass of the timers has still to look at
  // One turn of the loop over every simulated node: its ready sockets, and
  // each 20 ms its timers; `note` is told of each node touched. Exits 1 if
  // a node fails.
  auto turn = [&](const std::function<void(size_t)>& note) {
    {
      const auto ready = loop.wait(Steady::now() + (tick_left > 0 ? Ms(0) : Ms(10)));
      auto now = Steady::now();
      std::vector<size_t> touched;
      for (const auto& r : ready) {
        posix::EventLoop::Owner* owner = loop.owner_of(r.tag);
        if (owner == nullptr) {
          continue;
        }
        owner->on_ready(r.tag, r.events);
        if (auto it = node_of.find(owner); it != node_of.end()) {
          touched.push_back(it->second);
        }  // else the fence's path (FencePath::prepare)
      }
      if (now >= next_tick || tick_left > 0) {  // timers: retries, heartbeats, overdue replies
        // In slices of at most 2 ms, the sockets looked at between them: when
        // every node's connect attempt timed out at once (a listen backlog
        // full at 16,384 nodes), one pass of reconnects takes longer than an
        // attempt may, and without a look at the sockets no connect that
        // completed would send its HELLO before it timed out again.
        if (tick_left == 0) {
          next_tick = now + Ms(20);
          tick_left = nodes.size();
        }
        const auto slice_end = now + Ms(2);
        while (tick_left > 0) {
          const size_t i = cursor++ % nodes.size();
          --tick_left;
          if (auto d = nodes[i]->deadline(); d && *d <= now) {
            nodes[i]->on_time(now);
            touched.push_back(i);
          }
          if (tick_left % 64 == 0 && Steady::now() >= slice_end) {
            break;
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
  // Drives every simulated node until each has `flag`. Counts as nodes
  // change, so that a loop turn costs what it touched.
  // Node i hands the verdict to these in memory (below node 0's children).
  std::vector<std::vector<size_t>> below_of;
  auto run_until = [&](bool State::*flag) {
    std::vector<char> seen(nodes.size(), 0);
    size_t count = 0;
    auto note_one = [&](size_t i) {
      if (!seen[i] && nodes[i]->state.*flag) {
        seen[i] = 1;
        ++count;
      }
    };
    auto note = [&](size_t i) {
      note_one(i);
      for (const size_t k : i < below_of.size() ? below_of[i] : std::vector<size_t>()) {
        note_one(k);
      }
    };
    for (size_t i = 0; i < nodes.size(); ++i) {
      note(i);
    }
    const bool progress = std::getenv("SIM_PROGRESS") != nullptr;
    auto next_report = Steady::now();
    while (count < nodes.size()) {
      turn(note);
      if (progress && Steady::now() >= next_report) {
        next_report = Steady::now() + Ms(1000);
        size_t linked = 0;
        for (const auto& node : nodes) {
          linked += node->store->handshaken() ? 1 : 0;
        }
        std::fprintf(stderr, "progress: %zu of %zu, %zu past the handshake\n", count, nodes.size(),
                     linked);
      }
    }
  };

  const auto start = Steady::now();
  for (int n = 1; n < nnodes; ++n) {
    JoinRecord self;
    self.run_id = "none";
    self.argv = command;
    self.nnodes = nnodes;
    self.nproc = nproc;
    self.node_rank = n;
    self.host = "sim" + std::to_string(n);
    self.addr = "127.0.0.1";
    auto agent = std::make_unique<AgentNode>(loop, port, nnodes, n, n <= probes);
    self.probe_port = agent->probe_port;
    node_of[agent->on_loop.get()] = nodes.size();
    node_of[&agent->probe] = nodes.size();
    agent->link->join(self);
    nodes.push_back(std::move(agent));
    sync(nodes.size() - 1);
    // The nodes made so far go on with their handshakes while the others
    // are made, as real nodes would: made all first (2 s at 16,384), the
    // first ones' handshakes would sit unanswered and fill node 0's pool.
    if (n % 256 == 0) {
      turn([](size_t) {});
      // A real node sends its HELLO as soon as its connect completes (one
      // round trip); this one process gets to each in turn, and once more
      // of its nodes wait in the handshake than node 0's pool holds (1,024)
      // node 0 closes the oldest, which retry: 40,233 closes at 16,384
      // nodes, all the simulator's own slowness. So at most 512 of its
      // nodes are in the handshake at once (counted among the last 4,096
      // made: the earlier ones are long past it).
      for (;;) {
        size_t waiting = 0;
        for (size_t i = nodes.size() > 4096 ? nodes.size() - 4096 : 0; i < nodes.size(); ++i) {
          waiting += nodes[i]->store->handshaken() ? 0 : 1;
        }
        if (waiting <= 512) {
          break;
        }
        turn([](size_t) {});
      }
    }
  }
  run_until(&State::joined);
  const auto joined = Steady::now();
  // The verdict down the tree of agents (agent/tree_room.hpp), past fan-out
  // + 1 nodes: every node below node 0's children takes back its read of the
  // verdict on node 0's store, as it does once its parent's store is
  // reached, and node 0's children hand the verdict on in memory (the links
  // below them are not simulated). Their heartbeats go to their parents,
  // in memory here: each counts its start once on node 0's store.
  // SIM_VERDICT_TREE=0: every node reads the verdict and beats on node 0's
  // store, as agents did before.
  const int plan_fanout = nodes[0]->state.tree_fanout;
  const char* verdict_tree = std::getenv("SIM_VERDICT_TREE");
  const char* beat_tree_text = std::getenv("SIM_BEAT_TREE");
  const bool beat_tree = beat_tree_text == nullptr || std::string(beat_tree_text) != "0";
  if ((verdict_tree == nullptr || std::string(verdict_tree) != "0") && plan_fanout >= 2 &&
      nnodes > plan_fanout + 1) {
    size_t unwatched = 0, below = 0;
    below_of.resize(nodes.size());
    for (const int child : tree_place(0, nnodes, plan_fanout).children) {
      AgentNode& top = *nodes[static_cast<size_t>(child - 1)];
      const int end = child + tree_place(child, nnodes, plan_fanout).subtree;
      for (int node = child + 1; node < end; ++node) {
        AgentNode& n = *nodes[static_cast<size_t>(node - 1)];
        top.below.push_back(&n);
        n.is_below = true;
        below_of[static_cast<size_t>(child - 1)].push_back(static_cast<size_t>(node - 1));
        n.link->watch_elsewhere([&unwatched] { ++unwatched; });
        if (beat_tree) {
          n.link->beat_up_the_tree();  // and no beat_on(): its parent is in memory
        }
        sync(static_cast<size_t>(node - 1));
        ++below;
      }
    }
    while (unwatched < below) {
      turn([](size_t) {});
    }
    std::fprintf(
        stderr, "the verdict travels the tree: %zu nodes read it below node 0's children\n", below);
  }
  std::fprintf(stderr, "joined\n");  // scale.py counts node 0's fds now
  std::fflush(stderr);

  // SIM_STATUS=DDPLAUNCH: the simulated nodes answer `ddplaunch status` as
  // agents do (StatusResponders, each node's record of NPROC ranks), and
  // `DDPLAUNCH status --json` runs 5 times against the job while they do.
  // Where the job has more than SIM_TREE_FANOUT + 1 nodes, the answers
  // travel the tree of agents (rendezvous/status_relay.hpp): node 0's
  // children answer on its store, each for its subtree, whose records it
  // makes in memory (the links below node 0's children are not simulated);
  // SIM_STATUS_TREE=0: every node answers on node 0's store, as agents
  // before the tree did.
  // `EXE WHAT --master-addr A --master-port P --json --timeout 120` run
  // `runs` times while the simulated nodes answer; the median of all but
  // the first (which warms the page cache), in seconds; -1 if one failed.
  const auto run_command = [&](const char* exe, const char* what, int runs) -> double {
    std::vector<double> took;
    const std::string addr = nodes[0]->config.master_addr;
    const std::string port_text = std::to_string(port);
    for (int k = 0; k < runs; ++k) {
      const char* args[] = {
          exe,      what,        "--master-addr", addr.c_str(), "--master-port", port_text.c_str(),
          "--json", "--timeout", "120",           nullptr};
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
      pid_t pid = 0;
      const auto t0 = Steady::now();
      posix_spawn(&pid, exe, &fa, nullptr, const_cast<char* const*>(args), environ);
      posix_spawn_file_actions_destroy(&fa);
      int wstatus = 0;
      while (waitpid(pid, &wstatus, WNOHANG) == 0) {
        turn([](size_t) {});
      }
      if (k > 0) {
        took.push_back(seconds(t0, Steady::now()));
      }
      if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        std::fprintf(stderr, "sim_nodes: ddplaunch %s failed (status %d)\n", what, wstatus);
        return -1;
      }
    }
    std::sort(took.begin(), took.end());
    return took[took.size() / 2];
  };

  std::string status_result;
  if (const char* exe = std::getenv("SIM_STATUS"); exe != nullptr) {
    const char* fanout_text = std::getenv("SIM_TREE_FANOUT");
    const int fanout = fanout_text != nullptr ? std::atoi(fanout_text) : 8;
    const char* tree_text = std::getenv("SIM_STATUS_TREE");
    const bool tree = (tree_text == nullptr || std::string(tree_text) != "0") && fanout >= 2 &&
                      nnodes > fanout + 1;
    const auto record = [nproc](int node) {
      const int rank0 = node * nproc;
      std::string ranks;
      for (int r = 0; r < nproc; ++r) {
        ranks += (r ? "," : "") + std::string("{\"rank\":") + std::to_string(rank0 + r) +
                 ",\"local_rank\":" + std::to_string(r) +
                 ",\"pid\":4242,\"state\":\"running\",\"run_s\":12.5,"
                 "\"progress_events\":1234,\"since_progress_s\":0.2,"
                 "\"last_line\":\"epoch 3 step 1200 loss 0.1234\",\"cpu_s\":11.9,"
                 "\"cpu_percent\":95.2,\"rss_kib\":2345678,\"processes\":3}";
      }
      return "{\"node_rank\":" + std::to_string(node) +
             ",\"host\":\"sim\",\"addr\":\"127.0.0.1\",\"state\":\"running\","
             "\"ranks\":[" +
             ranks + "]}";
    };
    std::vector<std::unique_ptr<StatusResponder>> responders;
    const std::vector<int> answering = tree ? tree_place(0, nnodes, fanout).children : [&] {
      std::vector<int> all;
      for (int node = 1; node < nnodes; ++node) {
        all.push_back(node);
      }
      return all;
    }();
    for (const int node : answering) {
      const int subtree = tree ? tree_place(node, nnodes, fanout).subtree : 1;
      responders.push_back(std::make_unique<StatusResponder>(
          *nodes[static_cast<size_t>(node - 1)]->store, k_status_keys,
          [node, subtree, record](const std::string&, const StatusResponder::Reply& reply) {
            std::string all;
            for (int r = node; r < node + subtree; ++r) {
              all += record(r);
              all += '\n';
            }
            reply(subtree == 1 ? record(node) : all);
          }));
      responders.back()->start(node);
      sync(static_cast<size_t>(node - 1));
    }
    const auto took = run_command(exe, "status", 6);
    if (took < 0) {
      return 1;
    }
    status_result = ", \"status_s\": " + std::to_string(took);
  }

  // SIM_STACKS=DDPLAUNCH: every simulated node answers `ddplaunch stacks` as
  // agents do, on node 0's store (stacks do not travel the tree of agents):
  // NPROC ranks, each one process whose stacks are SIM_STACK_BYTES of text
  // (default 4,096, a Python rank's py-bt of a few frames), cut as agents
  // cut them (the nodes asked share StackCapture::k_bytes_per_job);
  // `DDPLAUNCH stacks --json` runs 3 times against the job while they do.
  std::string stacks_result;
  if (const char* exe = std::getenv("SIM_STACKS"); exe != nullptr) {
    const char* bytes_text = std::getenv("SIM_STACK_BYTES");
    const size_t asked = bytes_text != nullptr ? static_cast<size_t>(std::atol(bytes_text)) : 4096;
    // As an agent cuts them: the nodes asked share StackCapture::k_bytes_per_job.
    const size_t bytes = std::min(asked, StackCapture::bytes_for_node(static_cast<size_t>(nnodes)) /
                                             static_cast<size_t>(std::max(1, nproc)));
    std::vector<std::unique_ptr<StatusResponder>> responders;
    for (int node = 1; node < nnodes; ++node) {
      responders.push_back(std::make_unique<StatusResponder>(
          *nodes[static_cast<size_t>(node - 1)]->store, k_stacks_keys,
          [node, nproc, bytes](const std::string&, const StatusResponder::Reply& reply) {
            NodeStacks answer{node, "sim" + std::to_string(node), 0, std::nullopt, {}};
            for (int r = 0; r < nproc; ++r) {
              RankStacks rank{node * nproc + r, r, -1, 4242, "", {}};
              rank.processes.push_back(
                  ProcessStacks{4242, "/usr/bin/python3", "gdb", std::string(bytes, 'x'), ""});
              answer.ranks.push_back(std::move(rank));
            }
            reply(encode_node_stacks(answer));
          }));
      responders.back()->start(node);
      sync(static_cast<size_t>(node - 1));
    }
    const auto took = run_command(exe, "stacks", 3);
    if (took < 0) {
      return 1;
    }
    stacks_result = ", \"stacks_s\": " + std::to_string(took);
  }

  std::string fence_result;
  if (const char* bytes = std::getenv("SIM_FENCE_BYTES"); bytes != nullptr) {
    const size_t size = static_cast<size_t>(std::atol(bytes));
    const char* fanout_text = std::getenv("SIM_TREE_FANOUT");
    const int fanout = fanout_text != nullptr ? std::atoi(fanout_text) : 8;
    FencePath path(loop, nodes[0]->config.master_addr, port, nnodes, fanout, size,
                   [&](int node) -> StoreConnection& { return *nodes[node - 1]->store; });
    const auto fence_start = Steady::now();
    path.enter();
    while (!path.finished()) {
      path.prepare();
      turn([](size_t) {});
    }
    if (!path.ok()) {
      std::fprintf(stderr, "sim_nodes: the fence failed\n");
      return 1;
    }
    fence_result = ", \"fence_s\": " + std::to_string(seconds(fence_start, Steady::now())) +
                   ", \"fence_height\": " + std::to_string(path.height()) +
                   ", \"fence_links\": " + std::to_string(path.links());
  }

  // SIM_HOLD_S=S: the job runs 1 + S seconds before the stop, every node
  // beating as agents do; after the first second (each node's first beats
  // of the round), "steady" and, S seconds later, "held" on stderr mark the
  // span (bench/scale.py reads node 0's CPU at each).
  if (const char* hold = std::getenv("SIM_HOLD_S"); hold != nullptr && std::atof(hold) > 0) {
    const auto run_for = [&](double s) {
      const auto until = Steady::now() + std::chrono::duration_cast<Steady::duration>(
                                             std::chrono::duration<double>(s));
      while (Steady::now() < until) {
        turn([](size_t) {});
      }
    };
    run_for(1);
    std::fprintf(stderr, "steady\n");
    std::fflush(stderr);
    run_for(std::atof(hold));
    std::fprintf(stderr, "held\n");
    std::fflush(stderr);
  }

  nodes[0]->link->publish_stop(
      JobVerdict{7, "node 1 (sim1): a simulated failure", std::nullopt, 1});
  sync(0);
  const auto stop_sent = Steady::now();
  // Until every node that reads the verdict on node 0's store has it (every
  // node, or node 0's children where it travels the tree); then node 0's
  // children hand it down in memory. The stop reached every node when the
  // last of them read it: below them, each hop is in memory here, and one
  // store round trip per level on real nodes (docs/PERFORMANCE.md).
  for (;;) {
    const bool all = std::all_of(nodes.begin(), nodes.end(),
                                 [](const auto& n) { return n->is_below || n->state.verdict; });
    if (all) {
      break;
    }
    turn([](size_t) {});
  }
  auto verdict = stop_sent;
  for (const auto& n : nodes) {
    if (!n->is_below) {
      verdict = std::max(verdict, *n->verdict_at);
    }
    n->hand_down();
  }
  run_until(&State::verdict);
  const auto handled = Steady::now();
  for (size_t i = 0; i < nodes.size(); ++i) {
    nodes[i]->link->finish({});
    sync(i);
  }
  run_until(&State::finished);
  const auto finished = Steady::now();
  std::printf(
      "{\"joined_s\": %.4f, \"verdict_s\": %.4f, \"verdict_handled_s\": %.4f, "
      "\"verdict_code\": %d, \"finished_s\": %.4f%s%s%s}\n",
      seconds(start, joined), seconds(stop_sent, verdict), seconds(stop_sent, handled),
      nodes.back()->state.verdict_code, seconds(handled, finished), fence_result.c_str(),
      status_result.c_str(), stacks_result.c_str());
  return 0;
}
