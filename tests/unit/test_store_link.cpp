// StoreLink's two sides, HostLink (node 0) and MemberLink, against an
// in-memory store: the real KvCore behind fake connections whose replies the
// test delivers (or holds back), with a clock moved by hand. No socket, no
// thread, no sleep.
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "ddplaunch/error.hpp"
#include "fake_store.hpp"
#include "rendezvous/host_link.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/member_link.hpp"
#include "rendezvous/preflight.hpp"
#include "rendezvous/records.hpp"
#include "store/kv_core.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {
namespace {

using namespace testing_store;

using namespace std::chrono_literals;

struct Heard : JobLink::Listener {
  std::optional<Topology> topology;
  int node_rank = -1;
  std::vector<RoundStart> rounds;
  std::optional<std::pair<int, std::string>> failed;
  std::vector<JobVerdict> verdicts;
  std::optional<std::vector<RankOutcome>> finished;
  void on_joined(const Topology& t, int rank, const RoundStart& round) override {
    topology = t;
    node_rank = rank;
    rounds.push_back(round);
  }
  void on_join_failed(int code, const std::string& message) override {
    failed = std::pair(code, message);
  }
  void on_not_needed(int code, const std::string& message) override {
    not_needed = std::pair(code, message);
  }
  std::optional<std::pair<int, std::string>> not_needed;
  void on_verdict(const JobVerdict& v) override { verdicts.push_back(v); }
  void on_finished(std::vector<RankOutcome> ranks) override { finished = std::move(ranks); }
  // The preflight starts here as node `node_rank` (the test's hook then).
  std::function<void(int)> preflight_start;
  int preflight_rank = -1;
  void on_preflight_start(const Topology&, int rank, const RoundStart&) override {
    preflight_rank = rank;
    if (preflight_start) {
      preflight_start(rank);
    }
  }
  bool joined() const { return topology.has_value(); }
};

// The network preflight's connects: every path open at once (`answer`
// unset), or held until the test answers.
struct FakeProbe : NetworkProbe {
  bool answer_at_once = true;
  int held = 0;  // the port hold_port() holds
  bool can_hold = true;
  int releases = 0;
  int starts = 0;
  std::vector<ProbeTarget> targets;
  Done done;
  bool hold_port(int port) override {
    held = can_hold ? port : 0;
    return can_hold;
  }
  void release() override { ++releases; }
  void start(std::vector<ProbeTarget> t, TimePoint, Done d) override {
    ++starts;
    targets = std::move(t);
    done = std::move(d);
    if (answer_at_once) {
      answer({});
    }
  }
  void answer(std::vector<ProbeFailure> failures) {
    std::exchange(done, nullptr)(std::move(failures));
  }
  int fd() const override { return -1; }
  void on_ready(TimePoint) override {}
  std::optional<TimePoint> deadline() const override { return std::nullopt; }
  void on_time(TimePoint) override {}
};

// One agent: its connection, its link and what it heard.
struct Agent {
  FakeConnection conn;
  std::unique_ptr<StoreLink> link;
  Heard heard;
  JoinRecord self;
  FakeProbe probe;
  Agent(FakeStore& store, const Config& config, FakeClock& clock, bool host, JoinRecord record)
      : conn(store), self(std::move(record)) {
    static int port = 40000;
    const StoreAddress address{config.master_addr, config.master_port, ""};
    if (host) {
      link = std::make_unique<HostLink>(config, address, conn, clock, [] { return ++port; });
    } else {
      link = std::make_unique<MemberLink>(config, address, conn, clock);
    }
    link->set_listener(heard);
    link->set_probe(&probe);
  }
  void join() { link->join(self); }
};

class StoreLinkTest : public ::testing::Test {
 protected:
  FakeClock clock;
  FakeStore store{clock};
  Config config;
  std::vector<std::unique_ptr<Agent>> agents;

  StoreLinkTest() {
    config.nnodes = 2;
    config.master_addr = "10.0.0.1";
    config.master_port = 29500;
    config.rdzv_timeout_s = 60;
    config.heartbeat_interval_s = 1;
    config.heartbeat_timeout_s = 10;
    config.term_timeout_s = 5;
  }

  JoinRecord record(int node_rank = -1, const std::string& command = "train") const {
    JoinRecord r;
    r.run_id = config.rdzv_id;
    r.argv = {command};
    r.nnodes = config.nnodes;
    r.nnodes_min = config.nnodes_min;
    r.nproc = 1;
    r.node_rank = node_rank;
    r.host = "h" + std::to_string(agents.size());
    r.addr = "10.0.0." + std::to_string(agents.size() + 1);
    r.probe_port = 5000 + static_cast<int>(agents.size());
    r.max_restarts = config.max_restarts;
    return r;
  }
  Agent& add(bool host, std::optional<JoinRecord> r = std::nullopt) {
    agents.push_back(std::make_unique<Agent>(store, config, clock, host, r ? *r : record()));
    return *agents.back();
  }
  Agent& host() { return *agents.at(0); }
  Agent& member(size_t i = 1) { return *agents.at(i); }
  // Delivers every waiting reply, until none is left.
  void settle() {
    for (bool any = true; any;) {
      any = false;
      for (auto& a : agents) {
        while (a->conn.deliver_one()) {
          any = true;
        }
      }
      for (FakeConnection* c : extra) {
        while (c->deliver_one()) {
          any = true;
        }
      }
    }
  }
  // Connections to other stores (an interior node's in the tree of agents)
  // that settle() delivers too, and those stores, whose parked requests
  // advance() times out.
  std::vector<FakeConnection*> extra;
  std::vector<FakeStore*> extra_stores;
  // Moves the clock: parked requests time out, the links' timers run (but
  // the members', without `tick_members`, and agent `silent`'s).
  void advance(std::chrono::milliseconds d, bool tick_members = true, size_t silent = SIZE_MAX) {
    const auto end = clock.t + d;
    while (clock.t < end) {
      clock.t = std::min(end, clock.t + 250ms);
      store.route(store.core.expire(clock.t));
      for (FakeStore* other : extra_stores) {
        other->route(other->core.expire(clock.t));
      }
      for (size_t i = 0; i < agents.size(); ++i) {
        if ((i == 0 || tick_members) && i != silent) {
          agents[i]->link->on_time(clock.t);
        }
      }
      settle();
    }
  }
  // A third party on the store: the test writes records as it likes.
  void write(const std::string& key, const std::string& value) {
    store.route(store.core.apply(
        0, protocol::decode_request(std::string_view(protocol::request::set(key, value)).substr(4)),
        clock.t));
  }
  void two_nodes_running() {
    add(true);
    add(false);
    host().join();
    member().join();
    settle();
    ASSERT_TRUE(host().heard.joined() && member().heard.joined());
  }
  // Node 0 and a member join; node 0's probes (else the member's) wait
  // for the test's answer.
  void two_nodes_probing(bool host_waits) {
    add(true);
    add(false);
    (host_waits ? host() : member()).probe.answer_at_once = false;
    host().join();
    member().join();
    settle();
  }
  // Two nodes run an elastic job at MAX (2); a third agent joins and
  // waits as a spare.
  Agent& two_nodes_running_and_a_spare() {
    two_nodes_running();
    add(false);
    agents.back()->join();
    settle();
    return *agents.back();
  }
  // Rank 1 fails; both nodes go to round `next`.
  void restart_both(RoundStart next) {
    host().link->publish_stop(failure(1));
    settle();
    host().link->next_round({}, next);
    member().link->next_round({}, next);
    settle();
  }
  static JobVerdict failure(int rank, int code = 7) {
    RankOutcome r;
    r.rank = rank;
    r.exit = ExitInfo::exited(code);
    return JobVerdict{code, "", r, rank};
  }
};

// --- joining ---------------------------------------------------------------

TEST_F(StoreLinkTest, TwoNodesJoinAndAgreeOnThePlan) {
  two_nodes_running();
  EXPECT_EQ(host().heard.node_rank, 0);
  EXPECT_EQ(member().heard.node_rank, 1);
  EXPECT_EQ(host().heard.topology->nnodes(), 2);
  EXPECT_EQ(member().heard.topology->world_size, 2);
  EXPECT_EQ(member().heard.topology->master_port, host().heard.topology->master_port);
  EXPECT_EQ(member().heard.rounds, (std::vector<RoundStart>{{0, 0}}));
}

TEST_F(StoreLinkTest, TheHostIsNodeZeroWhateverItsArrival) {
  add(true);
  add(false);
  member().join();  // arrival 0
  settle();
  host().join();  // arrival 1
  settle();
  EXPECT_EQ(host().heard.node_rank, 0);
  EXPECT_EQ(member().heard.node_rank, 1);
}

TEST_F(StoreLinkTest, MoreAgentsThanNodesAtOnceFormTheJobAndRefuseTheRest) {
  for (int order = 0; order < 4; ++order) {  // the host at each arrival position
    FakeStore fresh(clock);
    std::vector<std::unique_ptr<Agent>> four;
    for (int i = 0; i < 4; ++i) {
      four.push_back(std::make_unique<Agent>(fresh, config, clock, i == order, record()));
    }
    for (auto& a : four) {
      a->join();
    }
    for (bool any = true; any;) {
      any = false;
      for (auto& a : four) {
        while (a->conn.deliver_one()) {
          any = true;
        }
      }
    }
    int joined = 0;
    int refused = 0;
    for (auto& a : four) {
      joined += a->heard.joined() ? 1 : 0;
      if (a->heard.failed) {
        ++refused;
        EXPECT_EQ(a->heard.failed->first, k_exit_rendezvous);
        EXPECT_NE(a->heard.failed->second.find("more agents joined than --nnodes 2"),
                  std::string::npos)
            << a->heard.failed->second;
      }
    }
    EXPECT_EQ(joined, 2) << "host at arrival " << order;
    EXPECT_EQ(refused, 2) << "host at arrival " << order;
    EXPECT_TRUE(four[static_cast<size_t>(order)]->heard.joined());
  }
}

TEST_F(StoreLinkTest, AStrangerIsRefusedAloneAndTheJobGoesOn) {
  add(true);
  add(false, record(-1, "another"));
  host().join();
  member().join();
  settle();
  ASSERT_TRUE(member().heard.failed);
  EXPECT_EQ(member().heard.failed->first, k_exit_rendezvous);
  EXPECT_NE(member().heard.failed->second.find("runs 'another'"), std::string::npos);
  EXPECT_FALSE(host().heard.failed) << "node 0 goes on waiting";
  add(false);
  member(2).join();
  settle();
  EXPECT_TRUE(host().heard.joined());
  EXPECT_EQ(member(2).heard.node_rank, 1);
}

TEST_F(StoreLinkTest, ADisagreementOnTheJobsShapeEndsRendezvousOnEveryNode) {
  add(true);
  JoinRecord other = record();
  other.nnodes = 3;
  add(false, other);
  host().join();
  member().join();
  advance(6s);  // node 0 waits (bounded) for the others to read why
  ASSERT_TRUE(host().heard.failed && member().heard.failed);
  EXPECT_EQ(host().heard.failed->first, k_exit_rendezvous);
  EXPECT_EQ(member().heard.failed->first, k_exit_rendezvous);
  EXPECT_NE(member().heard.failed->second.find("--nnodes 3 but node 0 has --nnodes 2"),
            std::string::npos)
      << member().heard.failed->second;
}

TEST_F(StoreLinkTest, NodeZeroTimesOutNamingTheMissingNodes) {
  add(true);
  host().join();
  settle();
  advance(61s);
  ASSERT_TRUE(host().heard.failed);
  EXPECT_EQ(host().heard.failed->first, k_exit_rendezvous);
  EXPECT_NE(host().heard.failed->second.find("1/2 joined"), std::string::npos)
      << host().heard.failed->second;
}

TEST_F(StoreLinkTest, AMemberWithoutNodeZeroTimesOut) {
  add(false);
  member(0).join();
  settle();
  advance(64s);
  EXPECT_FALSE(member(0).heard.failed) << "it waits a little past its own deadline";
  advance(2s);
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_NE(member(0).heard.failed->second.find("never published the job's plan"),
            std::string::npos);
}

TEST_F(StoreLinkTest, AStalledReplyDelaysOnlyThatNode) {
  add(true);
  add(false);
  member().conn.hold(true);
  host().join();
  member().join();  // its first request reaches the store; the answer waits
  settle();
  EXPECT_FALSE(member().heard.joined());
  EXPECT_FALSE(host().heard.joined()) << "its record is not written until the ADD is answered";
  member().conn.hold(false);
  settle();
  EXPECT_TRUE(host().heard.joined());
  EXPECT_TRUE(member().heard.joined());
}

// --- the connection's failures, by kind --------------------------------------

TEST_F(StoreLinkTest, AStoreThatCannotBeReachedIsARendezvousFailureWithAHint) {
  add(false);
  member(0).join();
  member(0).conn.fail(StoreConnection::Failure::k_unreachable,
                      "cannot reach the store at 10.0.0.1:29500 (Connection refused)");
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_EQ(member(0).heard.failed->first, k_exit_rendezvous);
  EXPECT_NE(member(0).heard.failed->second.find("within --rdzv-timeout 60 s"), std::string::npos);
}

TEST_F(StoreLinkTest, ARefusedHandshakeIsARendezvousFailure) {
  add(false);
  member(0).join();
  member(0).conn.fail(StoreConnection::Failure::k_refused,
                      "store at 10.0.0.1:29500: refused this node: protocol version mismatch");
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_EQ(member(0).heard.failed->first, k_exit_rendezvous);
  EXPECT_NE(member(0).heard.failed->second.find("version mismatch"), std::string::npos);
}

// Before node 0's answer the node is not part of the job: a closed
// connection is made anew and the joining goes on where it stood.
TEST_F(StoreLinkTest, AConnectionLostBeforeNodeZerosAnswerIsMadeAnew) {
  add(true);
  add(false);
  member().join();
  settle();  // its record is stored; it waits for node 0's answer
  member().conn.fail(StoreConnection::Failure::k_lost, "connection closed by the store");
  EXPECT_FALSE(member().heard.failed);
  advance(100ms);
  EXPECT_EQ(member().conn.reconnects, 1);
  host().join();
  settle();
  ASSERT_TRUE(member().heard.joined()) << member().heard.failed.value_or(std::pair(0, "")).second;
  EXPECT_TRUE(host().heard.joined());
  EXPECT_EQ(member().heard.topology->nnodes(), 2);
  EXPECT_EQ(store.value(keys::k_arrivals), std::optional<std::string>("2"))
      << "the same arrival, not a second one";
}

// Node 0's agent dies after two members stored their join records, and is
// started again with an empty store: each member, joining again, finds its
// arrival gone and takes a new one, so the new node 0 reads every record
// and the round starts with all three.
TEST_F(StoreLinkTest, MembersWhoseStoreWasStartedAgainJoinItAnew) {
  config.nnodes = 3;
  add(true);
  add(false);
  add(false);
  member(1).join();
  member(2).join();
  settle();  // both records stored; they wait for node 0's answer
  ASSERT_TRUE(store.value(keys::node(1)).has_value());
  // Node 0's agent and its store go; a new one starts on the same address.
  member(1).conn.fail(StoreConnection::Failure::k_lost, "connection closed by the store");
  member(2).conn.fail(StoreConnection::Failure::k_lost, "connection closed by the store");
  agents[0].reset();
  store.core = KvCore();
  agents[0] = std::make_unique<Agent>(store, config, clock, true, record());
  host().join();  // the new node 0 takes arrival 0 in the new store
  settle();
  advance(100ms);  // the members connect again
  settle();
  ASSERT_TRUE(member(1).heard.joined()) << member(1).heard.failed.value_or(std::pair(0, "")).second;
  ASSERT_TRUE(member(2).heard.joined());
  ASSERT_TRUE(host().heard.joined());
  EXPECT_EQ(host().heard.topology->nnodes(), 3);
  EXPECT_EQ(store.value(keys::k_arrivals), std::optional<std::string>("3"));
}

// The ADD was counted but its answer lost with the connection: the node
// takes a new arrival and gives up the arrivals before it without a record,
// so node 0, reading them in order, does not wait for one that never comes.
TEST_F(StoreLinkTest, AnArrivalWhoseAnswerWasLostIsGivenUp) {
  add(true);
  add(false);
  member().conn.hold(true);
  member().join();  // the ADD is counted; its answer waits
  member().conn.fail(StoreConnection::Failure::k_lost,
                     "a reply failed its authentication check (changed or injected on the way)");
  member().conn.hold(false);
  host().join();
  advance(100ms);
  settle();
  ASSERT_TRUE(member().heard.joined()) << member().heard.failed.value_or(std::pair(0, "")).second;
  ASSERT_TRUE(host().heard.joined());
  EXPECT_EQ(store.value(keys::node(0)), std::optional<std::string>(k_vacant_arrival));
  EXPECT_EQ(member().heard.topology->nnodes(), 2);
}

// A node whose arrival another node gave up (it was slow to write its
// record) takes a new one.
TEST_F(StoreLinkTest, ANodeWhoseArrivalWasGivenUpJoinsAnew) {
  add(true);
  add(false);
  write(keys::k_arrivals, "1");            // arrival 0: a node that lost the ADD's answer...
  write(keys::node(0), k_vacant_arrival);  // ...and gave it up
  write(keys::k_arrivals, "0");
  member().join();  // takes arrival 0 again: given up, so it takes 1
  host().join();
  settle();
  ASSERT_TRUE(member().heard.joined()) << member().heard.failed.value_or(std::pair(0, "")).second;
  EXPECT_TRUE(host().heard.joined());
  EXPECT_EQ(store.value(keys::node(0)), std::optional<std::string>(k_vacant_arrival));
}

// Tried again until --rdzv-timeout, then the rendezvous fails.
TEST_F(StoreLinkTest, AConnectionThatKeepsClosingWhileJoiningFailsAtTheRendezvousTimeout) {
  add(false);
  member(0).join();
  settle();
  for (int i = 0; i < 1000 && !member(0).heard.failed; ++i) {
    member(0).conn.fail(StoreConnection::Failure::k_lost, "connection closed by the store");
    advance(1000ms);
  }
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_EQ(member(0).heard.failed->first, k_exit_node_lost);
  EXPECT_GE(member(0).conn.reconnects, 50) << "about one a second for 60 s";
  EXPECT_LE(member(0).conn.reconnects, 70);
}

// A request the store refuses is not a lost connection: no retry.
TEST_F(StoreLinkTest, ARequestTheStoreRefusesWhileJoiningFailsAtOnce) {
  add(false);
  member(0).join();
  settle();
  member(0).conn.fail(StoreConnection::Failure::k_rejected, "refused the request: key too long");
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_EQ(member(0).conn.reconnects, 0);
}

// Once node 0's answer is read the node is part of the job: a closed
// connection then is a lost node, as in the round.
TEST_F(StoreLinkTest, AConnectionLostAfterNodeZerosAnswerIsExit4) {
  two_nodes_probing(true);
  ASSERT_FALSE(member().heard.joined()) << "node 0's preflight holds the round back";
  member().conn.fail(StoreConnection::Failure::k_lost, "connection closed by the store");
  ASSERT_TRUE(member().heard.failed);
  EXPECT_EQ(member().heard.failed->first, k_exit_node_lost);
  EXPECT_EQ(member().conn.reconnects, 0);
}

TEST_F(StoreLinkTest, AConnectionLostWhileRunningIsTheJobsVerdict) {
  two_nodes_running();
  member().conn.fail(StoreConnection::Failure::k_lost, "connection closed by the store");
  ASSERT_EQ(member().heard.verdicts.size(), 1u);
  EXPECT_EQ(member().heard.verdicts[0].exit_code, k_exit_node_lost);
  EXPECT_NE(member().heard.verdicts[0].message.find("lost contact with the store"),
            std::string::npos);
}

TEST_F(StoreLinkTest, AMemberWhoseConnectionClosesIsNamedLostAtOnce) {
  two_nodes_running();
  member().conn.fail(StoreConnection::Failure::k_lost, "killed");
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u) << "its ON_CLOSE word, not a heartbeat timeout";
  EXPECT_EQ(host().heard.verdicts[0].exit_code, k_exit_node_lost);
  EXPECT_EQ(host().heard.verdicts[0].lost, 1);
  EXPECT_NE(host().heard.verdicts[0].message.find("node 1 (h1) was lost"), std::string::npos);
}

// --- verdicts -----------------------------------------------------------------

TEST_F(StoreLinkTest, AStopReachesEveryNodeAndIsConfirmed) {
  two_nodes_running();
  member().link->publish_stop(failure(1));
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  ASSERT_EQ(member().heard.verdicts.size(), 1u);
  EXPECT_EQ(host().heard.verdicts[0], failure(1));
  EXPECT_TRUE(member().link->stop_confirmed());
}

TEST_F(StoreLinkTest, TheFirstStopWinsOnEveryNode) {
  two_nodes_running();
  host().link->publish_stop(failure(0, 3));
  member().link->publish_stop(failure(1, 9));
  settle();
  EXPECT_EQ(host().heard.verdicts, (std::vector<JobVerdict>{failure(0, 3)}));
  EXPECT_EQ(member().heard.verdicts, (std::vector<JobVerdict>{failure(0, 3)}));
}

TEST_F(StoreLinkTest, AFailureVerdictSaysWhetherAnyNodeMadeProgress) {
  // --restart-min-progress: node 0's ranks print (rank 0 alone often does),
  // node 1's rank fails at once. The verdict node 1 publishes says the round
  // made progress, so every node counts it against --max-restarts alike.
  two_nodes_running();
  host().link->report_progress();
  settle();
  JobVerdict quiet = failure(1);
  quiet.progress = 0;  // none on node 1 itself
  member().link->publish_stop(quiet);
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_EQ(host().heard.verdicts[0].progress, 1);
  EXPECT_EQ(member().heard.verdicts[0].progress, 1);
}

TEST_F(StoreLinkTest, AFailureVerdictWithoutProgressAnywhereSaysSo) {
  two_nodes_running();
  JobVerdict quiet = failure(1);
  quiet.progress = 0;
  member().link->publish_stop(quiet);
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_EQ(host().heard.verdicts[0].progress, 0);
}

TEST_F(StoreLinkTest, SuccessNeedsEveryNode) {
  two_nodes_running();
  host().link->publish_success();
  settle();
  EXPECT_TRUE(host().heard.verdicts.empty());
  member().link->publish_success();
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_TRUE(host().heard.verdicts[0].success());
  ASSERT_EQ(member().heard.verdicts.size(), 1u);
  EXPECT_TRUE(member().heard.verdicts[0].success());
}

TEST_F(StoreLinkTest, AStopSignalWhileJoiningEndsRendezvousEverywhere) {
  config.nnodes = 3;
  add(true, record());
  add(false, record());
  host().self.nnodes = member().self.nnodes = 3;
  host().join();
  member().join();
  settle();
  member().link->publish_stop(JobVerdict{130, "node ? received SIGINT", std::nullopt, -1});
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_EQ(host().heard.verdicts[0].exit_code, 130);
  EXPECT_FALSE(host().heard.joined());
}

TEST_F(StoreLinkTest, AMalformedVerdictRecordIsExit4NotACrash) {
  two_nodes_running();
  write(keys::stop(0), "{not json");
  settle();
  ASSERT_EQ(member().heard.verdicts.size(), 1u);
  EXPECT_EQ(member().heard.verdicts[0].exit_code, k_exit_node_lost);
  EXPECT_NE(member().heard.verdicts[0].message.find("malformed job/0/stop"), std::string::npos);
}

// --- a member against records the test writes (node 0 played by hand) -------

class MemberAlone : public StoreLinkTest {
 protected:
  void SetUp() override {
    add(false, record(1));
    member(0).join();
    settle();
  }
  Topology plan(int nproc_of_node1 = 1) const {
    Topology t;
    t.master_addr = "10.0.0.1";
    t.master_port = 1234;
    t.sizes = {{1, 1}, {nproc_of_node1, 1}};
    t.world_size = 1 + nproc_of_node1;
    return t;
  }
  void answer(const std::string& text) { write(keys::plan(0), text); }
};

TEST_F(MemberAlone, AVerdictHeardBeforeItsAnswerIsReadAfterTheAnswer) {
  write(keys::stop(0), encode_verdict(failure(0)));
  settle();
  EXPECT_TRUE(member(0).heard.verdicts.empty()) << "deferred: its answer comes first";
  answer(encode_answer(JoinAnswer{1, "", false}));
  write(keys::k_plan, encode_plan(TopologyRecord{plan(), ""}));
  settle();
  ASSERT_TRUE(member(0).heard.joined());
  EXPECT_EQ(member(0).heard.verdicts, (std::vector<JobVerdict>{failure(0)}))
      << "it restarts with the others instead of ending alone";
}

TEST_F(MemberAlone, ARefusedAgentHearingTheJobsSuccessEndsWithItsRefusal) {
  JobVerdict success;
  write(keys::stop(0), encode_verdict(success));
  answer(encode_answer(JoinAnswer{-1, "more agents joined than --nnodes 2", false}));
  settle();
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_EQ(member(0).heard.failed->first, k_exit_rendezvous);
  EXPECT_TRUE(member(0).heard.verdicts.empty()) << "never the job's success";
}

TEST_F(MemberAlone, ARankOutsideTheJobIsRefusedBeforeAnyIndexing) {
  answer(encode_answer(JoinAnswer{5, "", false}));
  write(keys::k_plan, encode_plan(TopologyRecord{plan(), ""}));
  settle();
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_NE(member(0).heard.failed->second.find("node rank 5 is outside the job's 2 nodes"),
            std::string::npos)
      << member(0).heard.failed->second;
}

TEST_F(MemberAlone, AForgedPlanWithTheWrongWorkerCountIsNamed) {
  answer(encode_answer(JoinAnswer{1, "", false}));
  write(keys::k_plan, encode_plan(TopologyRecord{plan(5), ""}));
  settle();
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_NE(member(0).heard.failed->second.find("5 workers, this node starts 1"),
            std::string::npos);
}

TEST_F(MemberAlone, AMalformedAnswerIsNamed) {
  answer("garbage");
  settle();
  ASSERT_TRUE(member(0).heard.failed);
  EXPECT_NE(member(0).heard.failed->second.find("malformed answer (rdzv/plan/0)"),
            std::string::npos);
  EXPECT_EQ(store.value(keys::ack(0)), "1") << "it said it read node 0's answer";
}

// --- the run, its end, and rounds ------------------------------------------------

TEST_F(StoreLinkTest, NodeZeroFindsASilentNodeLostAfterTheHeartbeatTimeout) {
  two_nodes_running();
  advance(5s);
  EXPECT_TRUE(host().heard.verdicts.empty()) << "both beat";
  advance(12s, /*tick_members=*/false);
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_EQ(host().heard.verdicts[0].lost, 1);
  EXPECT_NE(host().heard.verdicts[0].message.find("no heartbeat for 10 s"), std::string::npos);
}

// Heartbeats up the tree of agents, as TreeRoom arranges them for three
// nodes of fan-out 1: node 0 watches node 1 on the job's store and counts
// node 2's start there; node 2 beats on node 1's own store, where node 1
// watches it.
class BeatsUpTheTree : public StoreLinkTest {
 protected:
  FakeStore tree_store{clock};  // node 1's, for its child
  FakeConnection down{tree_store};
  FakeConnection up{tree_store};

  void SetUp() override {
    config.nnodes = 3;
    add(true);
    add(false);
    add(false);
    for (auto& a : agents) {
      a->join();
    }
    settle();
    ASSERT_TRUE(host().heard.joined() && member(2).heard.joined());
    ASSERT_EQ(member(2).heard.node_rank, 2);
    extra = {&down, &up};
    host().link->watch_beats(nullptr, {1}, 1);
    member(1).link->watch_beats(&down, {2});
    member(2).link->beat_up_the_tree();
    member(2).link->beat_on(&up);
  }
};

TEST_F(BeatsUpTheTree, NodeZeroReadsItsChildrensBeatsAndTheirParentsTheRest) {
  advance(5s);
  EXPECT_TRUE(host().heard.verdicts.empty());
  EXPECT_FALSE(store.value(keys::heartbeat(0, 2))) << "node 2's beats do not reach node 0's store";
  EXPECT_TRUE(tree_store.value(keys::heartbeat(0, 2)));
  EXPECT_EQ(store.value(keys::started(0)), "1") << "counted once, not each beat";
  const int read = host().conn.values_read;
  advance(5s);
  // Each second: node 1's beat, its result and the started count.
  EXPECT_LE(host().conn.values_read - read, 5 * 3 + 3);
}

TEST_F(BeatsUpTheTree, AParentFindsItsSilentChildLostAndEveryNodeHearsIt) {
  advance(3s);
  advance(12s, true, /*silent=*/2);
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  const JobVerdict& v = host().heard.verdicts[0];
  EXPECT_EQ(v.lost, 2);
  EXPECT_EQ(v.node, 1) << "its parent published it";
  EXPECT_EQ(v.exit_code, k_exit_node_lost);
  EXPECT_NE(v.message.find("node 2 (h2) was lost: no heartbeat for 10 s reached node 1, its "
                           "parent in the tree"),
            std::string::npos)
      << v.message;
  EXPECT_EQ(member(1).heard.verdicts.size(), 1u);
}

TEST_F(BeatsUpTheTree, ANodeWhoseLinkToItsParentBrokeBeatsOnTheJobsStore) {
  advance(2s);
  up.fail(StoreConnection::Failure::k_lost, "gone");
  member(2).link->beat_on(nullptr);
  advance(2s);
  EXPECT_TRUE(store.value(keys::heartbeat(0, 2)));
}

// An elastic 3:4 job regroups to admit a fourth node only once every node
// started the round: node 2's start is known to node 0 by the count alone.
TEST_F(StoreLinkTest, NodeZeroRegroupsOnlyOnceTheNodesBelowItsChildrenAreCounted) {
  config.nnodes_min = 3;
  config.nnodes = 4;
  config.max_restarts = 1;
  config.rdzv_last_call_s = 1;
  for (int i = 0; i < 3; ++i) {
    add(i == 0).join();
  }
  settle();
  while (!host().heard.joined()) {
    advance(250ms);
  }
  ASSERT_EQ(host().heard.topology->nnodes(), 3);
  FakeStore tree_store{clock};
  FakeConnection down{tree_store};
  FakeConnection up{tree_store};
  extra = {&down, &up};
  const size_t deep = member(1).heard.node_rank == 2 ? 1 : 2;
  const size_t child = 3 - deep;
  host().link->watch_beats(nullptr, {1}, 1);
  member(child).link->watch_beats(&down, {2});
  member(deep).link->beat_up_the_tree();
  member(deep).link->beat_on(&up);
  add(false).join();
  settle();
  EXPECT_FALSE(agents.back()->link->admitted()) << "it waits";
  advance(3s, true, /*silent=*/deep);
  EXPECT_TRUE(host().heard.verdicts.empty()) << "node 2 has not started, as far as node 0 knows";
  advance(2s);
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_TRUE(host().heard.verdicts[0].regroup);
}

TEST_F(StoreLinkTest, NodeZeroGathersEveryNodesResults) {
  two_nodes_running();
  host().link->publish_stop(failure(1));
  settle();
  RankOutcome mine;
  mine.rank = 0;
  RankOutcome theirs;
  theirs.rank = 1;
  theirs.node_rank = 1;
  host().link->finish({mine});
  settle();
  EXPECT_FALSE(host().heard.finished) << "it waits for node 1's";
  member().link->finish({theirs});
  settle();
  ASSERT_TRUE(host().heard.finished && member().heard.finished);
  ASSERT_EQ(host().heard.finished->size(), 2u);
  EXPECT_EQ((*host().heard.finished)[1].rank, 1);
  EXPECT_EQ(member().heard.finished->size(), 1u);
}

TEST_F(StoreLinkTest, AMemberLeavesWhenNodeZeroDoesNotAcknowledgeItsResults) {
  two_nodes_running();
  member().conn.hold(true);
  member().link->finish({});
  advance(500ms);
  EXPECT_FALSE(member().heard.finished);
  advance(600ms);
  EXPECT_TRUE(member().heard.finished);
}

TEST_F(StoreLinkTest, AnAbandoningNodeReportsNoRanks) {
  two_nodes_running();
  member().link->abandon();
  EXPECT_FALSE(member().link->abandoned());
  settle();
  EXPECT_TRUE(member().link->abandoned());
  EXPECT_EQ(store.value(keys::result(0, 1)), encode_outcomes({}));
}

TEST_F(StoreLinkTest, ARestartMeetsAgainInTheRoundTheAgentNumbers) {
  config.max_restarts = 3;
  two_nodes_running();
  const int first_port = host().heard.topology->master_port;
  restart_both(RoundStart{1, 1});
  ASSERT_EQ(host().heard.rounds.size(), 2u);
  EXPECT_EQ(host().heard.rounds[1], (RoundStart{1, 1}));
  EXPECT_EQ(member().heard.rounds[1], (RoundStart{1, 1})) << "the restarts come in the plan";
  EXPECT_NE(member().heard.topology->master_port, first_port) << "a fresh MASTER_PORT";
  EXPECT_TRUE(store.value(keys::round_plan(1)));
  // The new round's verdict is heard; the old one's is not heard twice.
  member().link->publish_stop(failure(0, 5));
  settle();
  EXPECT_EQ(host().heard.verdicts.back(), failure(0, 5));
  EXPECT_EQ(host().heard.verdicts.size(), 2u);
}

// The member's workers still stop for the restart (up to --term-timeout)
// when its agent is killed: its last word is on the next round's stop key
// already, so node 0 hears it at once, not after the restart's deadline.
TEST_F(StoreLinkTest, AMemberKilledWhileItsWorkersStopForARestartIsLostAtOnce) {
  config.max_restarts = 1;
  two_nodes_running();
  host().link->publish_stop(failure(0));
  settle();
  host().link->next_round({}, RoundStart{1, 1});
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  member().conn.fail(StoreConnection::Failure::k_lost, "killed");
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 2u) << "no time passed: its ON_CLOSE word";
  EXPECT_EQ(host().heard.verdicts[1].exit_code, k_exit_node_lost);
  EXPECT_EQ(host().heard.verdicts[1].lost, 1);
  EXPECT_NE(host().heard.verdicts[1].message.find("node 1 (h1) was lost"), std::string::npos);
}

// The same, when the member is killed before node 0's own workers have
// ended: node 0 hears the last word while it has not yet stored its own
// results, and must not keep it for a round that cannot start.
TEST_F(StoreLinkTest, AMemberKilledBeforeNodeZerosWorkersEndedIsLostAtOnce) {
  config.max_restarts = 1;
  two_nodes_running();
  host().link->publish_stop(failure(0));
  settle();
  member().conn.fail(StoreConnection::Failure::k_lost, "killed");
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  host().link->next_round({}, RoundStart{1, 1});
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 2u) << "no time passed: its ON_CLOSE word";
  EXPECT_EQ(host().heard.verdicts[1].exit_code, k_exit_node_lost);
  EXPECT_EQ(host().heard.verdicts[1].lost, 1);
}

// An elastic job goes on without that member, at once.
TEST_F(StoreLinkTest, AnElasticJobGoesOnWithoutAMemberKilledBeforeNodeZerosWorkersEnded) {
  config.max_restarts = 1;
  config.nnodes_min = 1;
  two_nodes_running();
  host().link->publish_stop(failure(0));
  settle();
  member().conn.fail(StoreConnection::Failure::k_lost, "killed");
  settle();
  host().link->next_round({}, RoundStart{1, 1});
  settle();
  ASSERT_EQ(host().heard.rounds.size(), 2u) << "the next round started without waiting";
  EXPECT_EQ(host().heard.topology->nnodes(), 1);
}

TEST_F(StoreLinkTest, TheLinkUsesTheRoundItIsGivenNotOneItCounts) {
  config.max_restarts = 9;
  two_nodes_running();
  restart_both(RoundStart{5, 2});
  EXPECT_EQ(member().heard.rounds.back(), (RoundStart{5, 2}));
  EXPECT_TRUE(store.value(keys::round_plan(5)));
  EXPECT_TRUE(store.value(keys::result(0, 1))) << "the ended round's results";
}

TEST_F(StoreLinkTest, ANodeThatDoesNotComeBackEndsAFixedSizeJob) {
  config.max_restarts = 1;
  two_nodes_running();
  host().link->publish_stop(failure(0));
  settle();
  host().link->next_round({}, RoundStart{1, 1});
  advance(21s);  // term 5 + heartbeat 10 + 5
  ASSERT_EQ(host().heard.verdicts.size(), 2u);
  EXPECT_EQ(host().heard.verdicts[1].exit_code, k_exit_node_lost);
  EXPECT_NE(host().heard.verdicts[1].message.find("did not end round 0's workers in time"),
            std::string::npos)
      << host().heard.verdicts[1].message;
}

TEST_F(StoreLinkTest, NextRoundAfterTheStoreWentIsExit4) {
  two_nodes_running();
  member().link->publish_stop(failure(1));
  settle();
  member().conn.fail(StoreConnection::Failure::k_lost, "connection closed by the store");
  member().link->next_round({}, RoundStart{1, 1});
  ASSERT_TRUE(member().heard.failed);
  EXPECT_EQ(member().heard.failed->first, k_exit_node_lost);
  EXPECT_NE(member().heard.failed->second.find("before the restart"), std::string::npos);
}

// --- membership while the job runs -----------------------------------------------

TEST_F(StoreLinkTest, AnAgentThatComesOnceAFixedSizeJobRunsIsRefused) {
  two_nodes_running();
  add(false);
  member(2).join();
  settle();
  ASSERT_TRUE(member(2).heard.failed);
  EXPECT_EQ(member(2).heard.failed->first, k_exit_rendezvous);
  EXPECT_TRUE(host().heard.verdicts.empty()) << "the job goes on";
}

TEST_F(StoreLinkTest, AnElasticJobAdmitsALateNodeByRegrouping) {
  config.nnodes_min = 1;
  config.nnodes = 2;
  config.max_restarts = 1;
  config.rdzv_last_call_s = 1;
  add(true);
  host().join();
  settle();
  advance(2s);  // the last call passes: one node runs
  ASSERT_TRUE(host().heard.joined());
  EXPECT_EQ(host().heard.topology->nnodes(), 1);
  add(false);
  member().join();
  settle();
  EXPECT_FALSE(member().heard.failed) << "it waits";
  EXPECT_FALSE(member().link->admitted());
  advance(2s);  // node 0 sees every node of the round started: it regroups
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_TRUE(host().heard.verdicts[0].regroup);
  host().link->next_round({}, RoundStart{1, 0});
  settle();
  ASSERT_TRUE(member().heard.joined());
  EXPECT_EQ(member().heard.topology->nnodes(), 2);
  EXPECT_EQ(member().heard.rounds.back(), (RoundStart{1, 0}));
  EXPECT_EQ(host().heard.rounds.back(), (RoundStart{1, 0}));
}

// Hot spares: a third agent of a 1:2 job waits; when node 1 is lost, the
// next round takes the spare as node 1, and every node hears which spare
// took which node's place.
TEST_F(StoreLinkTest, ASpareTakesALostMembersPlaceAndRank) {
  config.nnodes_min = 1;
  config.max_restarts = 1;
  Agent& spare = two_nodes_running_and_a_spare();
  EXPECT_FALSE(spare.link->admitted()) << "a spare: the job runs at MAX";
  member().conn.fail(StoreConnection::Failure::k_lost, "killed");
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_EQ(host().heard.verdicts[0].lost, 1);
  host().link->next_round({}, RoundStart{1, 1});
  settle();
  ASSERT_TRUE(spare.heard.joined());
  EXPECT_EQ(spare.heard.node_rank, 1) << "the lost node's rank";
  EXPECT_EQ(spare.heard.topology->nnodes(), 2) << "the job stays at MAX";
  const std::vector<NodeReplacement> replaced{{1, "h1", "h2"}};
  EXPECT_EQ(spare.heard.rounds.back().replaced, replaced);
  EXPECT_EQ(host().heard.rounds.back().replaced, replaced);
}

// A member of an elastic job killed while the nodes meet for a restart (or
// leaving, failing its health check): its last word sits on the next
// round's stop key. The round goes on without it (a spare in its place)
// and must not be ended by that word: node 0 clears the key, and a real
// verdict of the round still reaches every node.
TEST_F(StoreLinkTest, ANodeLeftOutOfAnElasticRoundDoesNotEndItWithItsLastWord) {
  config.nnodes_min = 1;
  config.max_restarts = 2;
  Agent& spare = two_nodes_running_and_a_spare();
  host().link->publish_stop(failure(0));
  settle();
  ASSERT_EQ(member().heard.verdicts.size(), 1u);
  member().conn.fail(StoreConnection::Failure::k_lost, "killed");  // as it stops its workers
  settle();
  host().link->next_round({}, RoundStart{1, 1});
  settle();
  ASSERT_TRUE(spare.heard.joined());
  EXPECT_EQ(spare.heard.node_rank, 1);
  ASSERT_EQ(host().heard.rounds.size(), 2u);
  EXPECT_EQ(host().heard.verdicts.size(), 1u) << "round 1 was not ended by node 1's last word";
  EXPECT_TRUE(spare.heard.verdicts.empty());
  spare.link->publish_stop(failure(1, 5));
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 2u);
  EXPECT_EQ(host().heard.verdicts[1], failure(1, 5));
  ASSERT_EQ(spare.heard.verdicts.size(), 1u);
  EXPECT_EQ(spare.heard.verdicts[0], failure(1, 5));
}

// --- the network preflight ------------------------------------------------------

// Node 0 holds MASTER_PORT open and publishes every probe port; each node
// probes the others (a member, node 0's MASTER_PORT too), and the round
// starts everywhere only once every report is in.
TEST_F(StoreLinkTest, ThePreflightProbesEveryPathBeforeTheFirstWorkersStart) {
  two_nodes_probing(true);
  ASSERT_EQ(host().probe.starts, 1);
  ASSERT_EQ(member().probe.starts, 1) << "the member's own probes answered at once";
  EXPECT_FALSE(member().heard.joined()) << "it waits for node 0's go";
  EXPECT_FALSE(host().heard.joined());
  const int master_port = host().probe.held;
  ASSERT_GT(master_port, 0);
  EXPECT_EQ(host().probe.targets, (std::vector<ProbeTarget>{{1, "h1", "10.0.0.2", 5001, false}}));
  EXPECT_EQ(member().probe.targets,
            (std::vector<ProbeTarget>{{0, "h0", "10.0.0.1", 5000, false},
                                      {0, "h0", "10.0.0.1", master_port, true}}));
  host().probe.answer({});
  settle();
  ASSERT_TRUE(host().heard.joined() && member().heard.joined());
  EXPECT_EQ(host().heard.topology->master_port, master_port);
  EXPECT_EQ(host().probe.releases, 1) << "MASTER_PORT is free again before rank 0 binds it";
  EXPECT_EQ(member().probe.releases, 1);
}

TEST_F(StoreLinkTest, ABlockedPathEndsTheJobOnEveryNodeNamingBothNodesAndThePort) {
  two_nodes_probing(false);
  ASSERT_EQ(member().probe.targets.size(), 2u);
  member().probe.answer({ProbeFailure{member().probe.targets[1], "connection refused"}});
  settle();
  EXPECT_FALSE(host().heard.joined());
  EXPECT_FALSE(member().heard.joined());
  for (auto* a : {&host(), &member()}) {
    ASSERT_EQ(a->heard.verdicts.size(), 1u);
    const JobVerdict& v = a->heard.verdicts[0];
    EXPECT_EQ(v.exit_code, k_exit_rendezvous);
    EXPECT_NE(v.message.find("network preflight: node 1 (h1) cannot reach node 0 (h0) at "
                             "10.0.0.1:" +
                             std::to_string(host().probe.held) + " (MASTER_PORT"),
              std::string::npos)
        << v.message;
    EXPECT_NE(v.message.find("connection refused"), std::string::npos);
    EXPECT_NE(v.message.find("--no-preflight"), std::string::npos);
  }
}

TEST_F(StoreLinkTest, ANodeWhosePreflightNeverEndsIsNamedAtTheDeadline) {
  two_nodes_probing(false);
  advance(16s, false);  // 2 x --preflight-timeout 5 + 5
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  EXPECT_EQ(host().heard.verdicts[0].exit_code, k_exit_rendezvous);
  EXPECT_NE(host().heard.verdicts[0].message.find(
                "node 1 (h1) did not finish its network preflight within 15 s"),
            std::string::npos)
      << host().heard.verdicts[0].message;
}

TEST_F(StoreLinkTest, AMemberLostDuringThePreflightEndsItAtOnce) {
  two_nodes_probing(false);
  member().conn.fail(StoreConnection::Failure::k_lost, "killed");
  settle();
  ASSERT_EQ(host().heard.verdicts.size(), 1u) << "no time passed: its last word";
  EXPECT_EQ(host().heard.verdicts[0].lost, 1);
  EXPECT_FALSE(host().heard.joined());
}

// The network preflight's reports up the tree of agents, as TreeRoom
// arranges them for four nodes of fan-out 2: node 2, below node 1, reports
// on node 1's own store; node 1 gathers it with its own and reports on the
// job's store, where node 0 reads its children's reports alone.
class PreflightUpTheTree : public StoreLinkTest {
 protected:
  FakeStore tree_store{clock};  // node 1's, for its child
  FakeConnection down{tree_store};
  FakeConnection up{tree_store};
  bool give_up_link = true;  // node 2 learns where to report at once

  void SetUp() override {
    config.nnodes = 4;
    config.tree_fanout = 2;
    ASSERT_EQ(tree_place(1, 4, 2).children, std::vector<int>{2});
    ASSERT_EQ(tree_place(0, 4, 2).children, (std::vector<int>{1, 3}));
    extra = {&down, &up};
    extra_stores = {&tree_store};
    for (int i = 0; i < 4; ++i) {
      Agent& a = add(i == 0);
      a.heard.preflight_start = [this, &a](int node_rank) {
        const TreePlace place = tree_place(node_rank, 4, 2);
        a.link->preflight_through_tree(place, tree_height(4, 2), node_rank == 1 ? &down : nullptr);
        if (place.parent > 0 && give_up_link) {
          a.link->report_to(&up);
        }
      };
    }
  }
  Agent& node(int rank) {
    for (auto& a : agents) {
      if (a->heard.preflight_rank == rank) {
        return *a;
      }
    }
    throw std::runtime_error("no such node");
  }
  void join_all() {
    for (auto& a : agents) {
      a->join();
    }
    settle();
  }
};

TEST_F(PreflightUpTheTree, EveryPathOpenEveryNodeRunsAndNodeZeroReadsItsChildrenAlone) {
  join_all();
  for (auto& a : agents) {
    ASSERT_TRUE(a->heard.joined()) << a->heard.preflight_rank;
  }
  EXPECT_FALSE(store.value(keys::probed(2))) << "node 2's report went to its parent's store";
  EXPECT_TRUE(tree_store.value(keys::probed(2)));
  EXPECT_TRUE(store.value(keys::probed(1))) << "node 1's, for its subtree";
  EXPECT_TRUE(store.value(keys::probed(3)));
}

TEST_F(PreflightUpTheTree, ABlockedPathBelowNodeZerosChildrenEndsTheJobNamingIt) {
  for (auto& a : agents) {
    a->probe.answer_at_once = false;
  }
  join_all();
  for (auto& a : agents) {
    if (a->heard.preflight_rank == 2) {
      ASSERT_FALSE(a->probe.targets.empty());
      a->probe.answer({ProbeFailure{a->probe.targets[0], "connection refused"}});
    } else {
      a->probe.answer({});
    }
  }
  settle();
  for (auto& a : agents) {
    EXPECT_FALSE(a->heard.joined());
    ASSERT_EQ(a->heard.verdicts.size(), 1u);
    const JobVerdict& v = a->heard.verdicts[0];
    EXPECT_EQ(v.exit_code, k_exit_rendezvous);
    EXPECT_NE(v.message.find("network preflight: node 2 ("), std::string::npos) << v.message;
    EXPECT_NE(v.message.find("connection refused"), std::string::npos) << v.message;
  }
}

TEST_F(PreflightUpTheTree, ANodeThatNeverReportsIsNamedByItsParentAtItsTime) {
  give_up_link = false;  // node 2's report waits for a link that never comes
  join_all();
  for (auto& a : agents) {
    EXPECT_FALSE(a->heard.joined());
  }
  advance(16s);
  ASSERT_EQ(host().heard.verdicts.size(), 1u);
  const JobVerdict& v = host().heard.verdicts[0];
  EXPECT_EQ(v.exit_code, k_exit_rendezvous);
  EXPECT_NE(v.message.find("network preflight: node 2 (h"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("did not finish its network preflight within 15 s"), std::string::npos)
      << v.message;
  EXPECT_EQ(v.message.find("more path"), std::string::npos) << "one line: node 1's report names it";
}

TEST_F(StoreLinkTest, NodeZerosNoPreflightSkipsItForTheJob) {
  config.preflight = false;
  two_nodes_running();
  EXPECT_EQ(host().probe.starts + member().probe.starts, 0);
  EXPECT_FALSE(store.value(keys::probe(0)));
}

TEST_F(StoreLinkTest, ANodeWithoutAProbePortIsNotProbedAndAnUnboundMasterPortIsSkipped) {
  add(true).probe.can_hold = false;
  JoinRecord r = record();
  r.probe_port = 0;
  add(false, r);
  host().join();
  member().join();
  settle();
  ASSERT_TRUE(host().heard.joined() && member().heard.joined());
  EXPECT_EQ(host().probe.starts, 0) << "nothing to probe: no start";
  EXPECT_EQ(member().probe.targets, (std::vector<ProbeTarget>{{0, "h0", "10.0.0.1", 5000, false}}));
}

TEST_F(StoreLinkTest, OnlyTheFirstRoundIsProbed) {
  config.max_restarts = 1;
  two_nodes_running();
  restart_both(RoundStart{1, 1});
  ASSERT_EQ(host().heard.rounds.size(), 2u);
  ASSERT_EQ(member().heard.rounds.size(), 2u);
  EXPECT_EQ(host().probe.starts, 1);
  EXPECT_EQ(member().probe.starts, 1);
}

}  // namespace
}  // namespace ddplaunch
