// `ddplaunch status`'s parts: a node's answers on request (StatusResponder
// over the fake store), the /proc stat parser and the screen.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "agent/python_stacks.hpp"
#include "agent/stack_capture.hpp"
#include "embedded.hpp"
#include "fake_store.hpp"
#include "node/process_usage.hpp"
#include "output/status_page.hpp"
#include "rendezvous/status_collector.hpp"
#include "rendezvous/status_relay.hpp"
#include "rendezvous/status_responder.hpp"
#include "status/stacks_codec.hpp"
#include "status/status_codec.hpp"
#include "status/status_screen.hpp"
#include "store/value_parts.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {
namespace {

using testing_store::FakeClock;
using testing_store::FakeConnection;
using testing_store::FakeStore;

void drain(std::initializer_list<FakeConnection*> conns) {
  for (bool any = true; any;) {
    any = false;
    for (auto* c : conns) {
      while (c->deliver_one()) {
        any = true;
      }
    }
  }
}

TEST(StatusResponder, EachRequestWakesTheNodeWhichAnswersOnceAndAwaitsTheNext) {
  FakeClock clock;
  FakeStore store(clock);
  FakeConnection node(store);
  FakeConnection asker(store);
  std::vector<std::string> asked;
  StatusResponder responder(
      node, k_status_keys, [&asked](const std::string& request, StatusResponder::Reply reply) {
        asked.push_back(request);
        reply(request == "skip" ? std::string() : "{\"n\":" + std::to_string(asked.size()) + "}");
      });
  responder.start(1);
  drain({&node});
  EXPECT_TRUE(asked.empty()) << "nothing is answered before it is asked";
  for (const char* request : {"first", "skip", "third"}) {
    asker.add(k_status_keys.seq(), 1, [&asker, request](int64_t n) {
      asker.set(k_status_keys.request(n), request, [] {});
    });
    drain({&asker, &node});
  }
  EXPECT_EQ(asked, (std::vector<std::string>{"first", "skip", "third"}));
  EXPECT_EQ(responder.answered(), 2);
  std::vector<std::optional<std::string>> got;
  for (int n : {1, 3}) {
    asker.get(k_status_keys.answer(n, 1), FakeConnection::Duration(1),
              [&got](std::optional<std::string> v) { got.push_back(v); });
  }
  drain({&asker});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "{\"n\":1}");
  EXPECT_EQ(got[1], "{\"n\":3}");
}

// A request made before the node's responder started (a one-node job's agent
// connects once the command does) is answered, then the next one.
TEST(StatusResponder, ANodeThatStartsLateAnswersTheRequestStillWaitingThenTheNext) {
  FakeClock clock;
  FakeStore store(clock);
  FakeConnection node(store);
  FakeConnection asker(store);
  asker.add(k_status_keys.seq(), 5, [](int64_t) {});
  asker.set(k_status_keys.request(5), "old", [] {});
  drain({&asker});
  std::vector<std::string> asked;
  StatusResponder responder(node, k_status_keys,
                            [&asked](const std::string& r, StatusResponder::Reply reply) {
                              asked.push_back(r);
                              reply("{}");
                            });
  responder.start(0);
  drain({&node});
  asker.set(k_status_keys.request(6), "new", [] {});
  drain({&asker, &node});
  EXPECT_EQ(asked, (std::vector<std::string>{"old", "new"}));
  EXPECT_EQ(responder.answered(), 2);
}

// `ddplaunch stacks`: the answer comes once the debuggers end; the next
// request is awaited meanwhile, and a reply after the responder is gone is
// dropped.
TEST(StatusResponder, AReplyMayComeLaterWhileTheNextRequestIsAwaited) {
  FakeClock clock;
  FakeStore store(clock);
  FakeConnection node(store);
  FakeConnection asker(store);
  std::vector<StatusResponder::Reply> pending;
  auto responder = std::make_unique<StatusResponder>(
      node, k_stacks_keys,
      [&pending](const std::string&, StatusResponder::Reply reply) { pending.push_back(reply); });
  responder->start(2);
  drain({&node});
  for (int i = 0; i < 2; ++i) {
    asker.add(k_stacks_keys.seq(), 1,
              [&asker](int64_t n) { asker.set(k_stacks_keys.request(n), "{}", [] {}); });
    drain({&asker, &node});
  }
  ASSERT_EQ(pending.size(), 2u) << "the second request is taken while the first is unanswered";
  pending[1]("{\"late\":2}");
  drain({&node});
  std::optional<std::string> got;
  asker.get(k_stacks_keys.answer(2, 2), FakeConnection::Duration(1),
            [&got](std::optional<std::string> v) { got = v; });
  drain({&asker});
  EXPECT_EQ(got, "{\"late\":2}");
  responder.reset();
  pending[0]("{\"late\":1}");  // dropped, not a use of the freed responder
  drain({&node});
  EXPECT_FALSE(k_status_keys.seq() == k_stacks_keys.seq());
}

// Seven nodes of fan-out 2 over in-memory stores, as StatusTree runs them:
// node 0's children (1 and 4) answer on the job's store, nodes 2, 3, 5 and 6
// on their parent's; nodes 1 and 4 hand each request on and answer with
// their subtree's records. The command reads two answers for six nodes, and
// no store below node 0 keeps a request's keys.
TEST(StatusRelay, EachChildOfNodeZeroAnswersForItsSubtreeAndNothingIsLeftBelow) {
  FakeClock clock;
  FakeStore job(clock);
  std::map<int, std::unique_ptr<FakeStore>> own;  // interior nodes' stores
  own[1] = std::make_unique<FakeStore>(clock);
  own[4] = std::make_unique<FakeStore>(clock);
  std::vector<std::unique_ptr<FakeConnection>> conns;
  std::vector<std::unique_ptr<StatusResponder>> responders;
  const RequestKeys round = tree_status_keys("round1");
  std::map<int, FakeConnection*> down;
  for (int node : {1, 4}) {
    conns.push_back(std::make_unique<FakeConnection>(*own[node]));
    down[node] = conns.back().get();
  }
  for (int node = 1; node < 7; ++node) {
    const TreePlace place = tree_place(node, 7, 2);
    FakeStore& parent = place.parent == 0 ? job : *own[place.parent];
    conns.push_back(std::make_unique<FakeConnection>(parent));
    FakeConnection* relay = place.children.empty() ? nullptr : down[node];
    responders.push_back(std::make_unique<StatusResponder>(
        *conns.back(), place.parent == 0 ? k_status_keys : round,
        [node, relay, round, place](const std::string& request, StatusResponder::Reply reply) {
          const std::string mine = "{\"node_rank\":" + std::to_string(node) + "}";
          if (relay == nullptr) {
            reply(mine);
            return;
          }
          relay_status(
              *relay, round, request, place.children, std::chrono::seconds(5),
              [reply, mine](const std::string& theirs) { reply(join_answers(mine, {theirs})); });
        }));
    responders.back()->start(node);
  }
  FakeConnection asker(job);
  const auto drain_all = [&] {
    for (bool any = true; any;) {
      any = false;
      for (auto& c : conns) {
        while (c->deliver_one()) {
          any = true;
        }
      }
      while (asker.deliver_one()) {
        any = true;
      }
    }
  };
  drain_all();
  for (int n = 1; n <= 2; ++n) {
    asker.add(k_status_keys.seq(), 1,
              [&asker](int64_t seq) { asker.set(k_status_keys.request(seq), "{}", [] {}); });
    drain_all();
    std::vector<int> index = {-1, 1, 2, 3, 4, 5, 6};
    std::vector<std::optional<NodeStatus>> answers(7);
    for (int child : {1, 4}) {
      std::optional<std::string> got;
      asker.get(k_status_keys.answer(n, child), FakeConnection::Duration(1),
                [&got](std::optional<std::string> v) { got = std::move(v); });
      drain_all();
      ASSERT_TRUE(got) << "request " << n << ", node " << child;
      place_subtree_answer(*got, child, child + 3, index, answers);
    }
    for (int node = 1; node < 7; ++node) {
      ASSERT_TRUE(answers[static_cast<size_t>(node)]) << "request " << n << ", node " << node;
      EXPECT_EQ(answers[static_cast<size_t>(node)]->node_rank, node);
    }
    for (int node : {1, 4}) {
      EXPECT_FALSE(own[node]->value(round.request(n))) << "node " << node;
      EXPECT_FALSE(own[node]->value(round.answer(n, node + 1))) << "node " << node;
    }
  }
  EXPECT_EQ(job.value(k_status_keys.answer(1, 2)), std::nullopt)
      << "nodes below node 0's children never answer on the job's store";
}

// A child that never answers costs its parent its time to gather, no more:
// the others' answers go up, and the late one finds the request gone.
TEST(StatusRelay, AChildThatDoesNotAnswerIsLeftOutWhenTheTimeToGatherIsUp) {
  FakeClock clock;
  FakeStore store(clock);
  FakeConnection down(store);
  FakeConnection child(store);
  const RequestKeys keys = tree_status_keys("round3");
  StatusResponder responder(child, keys, [](const std::string&, StatusResponder::Reply reply) {
    reply("{\"node_rank\":5}");
  });
  responder.start(5);
  std::optional<std::string> joined;
  relay_status(down, keys, "{}", {5, 6}, std::chrono::milliseconds(300),
               [&joined](std::string all) { joined = std::move(all); });
  for (int i = 0; i < 50; ++i) {
    down.deliver_one();
    child.deliver_one();
  }
  EXPECT_FALSE(joined) << "node 6 still has time";
  for (const int ms : {301, 2}) {  // the WAIT's time, then the GET of what is not there
    clock.t += std::chrono::milliseconds(ms);
    store.route(store.core.expire(clock.t));
    for (int i = 0; i < 50; ++i) {
      down.deliver_one();
      child.deliver_one();
    }
  }
  ASSERT_TRUE(joined);
  EXPECT_EQ(*joined, "{\"node_rank\":5}");
  EXPECT_FALSE(store.value(keys.request(1)));
}

// The live page's request in a tree of seven nodes of fan-out 2: node 1
// answers for nodes 1 to 3; node 4 is silent, and its children 5 and 6,
// whose link to it broke, answer on node 0's store each for itself. The
// page shows six nodes, names node 4 alone, and nothing is left behind.
TEST(StatusCollector, ReadsNodeZerosChildrenAndTheNodesThatLostTheirParent) {
  FakeClock clock;
  FakeStore store(clock);
  FakeConnection conn(store);
  FakeConnection nodes(store);
  StatusCollector collector(conn, clock, [] { return 7; });
  const auto drain = [&] {
    for (bool any = true; any;) {
      any = false;
      while (conn.deliver_one() || nodes.deliver_one()) {
        any = true;
      }
    }
  };
  collector.refresh();
  drain();
  const auto record = [](int node) { return "{\"node_rank\":" + std::to_string(node) + "}"; };
  NodeStatus node0;
  node0.node_rank = 0;
  node0.job = JobStatus();
  node0.job->nnodes = 7;
  node0.job->tree_fanout = 2;
  nodes.set(k_status_keys.answer(1, 0), encode_node_status(node0), [] {});
  nodes.set(k_status_keys.answer(1, 1), join_answers(record(1), {record(2) + "\n" + record(3)}),
            [] {});
  nodes.set(k_status_keys.answer(1, 5), record(5), [] {});
  nodes.set(k_status_keys.answer(1, 6), record(6), [] {});
  drain();
  EXPECT_TRUE(collector.in_flight()) << "node 4 has until the page's timeout";
  clock.t += std::chrono::seconds(3);
  store.route(store.core.expire(clock.t));
  drain();
  ASSERT_FALSE(collector.in_flight());
  const auto doc = decode_status_document(collector.last());
  ASSERT_TRUE(doc);
  std::vector<int> shown;
  for (const auto& n : doc->nodes) {
    shown.push_back(n.node_rank);
  }
  EXPECT_EQ(shown, (std::vector<int>{0, 1, 2, 3, 5, 6}));
  EXPECT_EQ(doc->missing, std::vector<int>{4});
  EXPECT_EQ(store.core.keys(), 1u) << "status/seq only";
}

TEST(StatusRelay, EachLevelGathersForLessTimeThanTheOneAboveIt) {
  EXPECT_GT(gather_time(30, 1, 4), gather_time(30, 2, 4));
  EXPECT_GT(gather_time(30, 2, 4), gather_time(30, 3, 4));
  EXPECT_LE(gather_time(30, 1, 4), std::chrono::seconds(30));
  EXPECT_GE(gather_time(0.2, 3, 4), std::chrono::milliseconds(100)) << "half the time at least";
}

// An answer over the store's largest value goes in parts and comes back
// whole; a head that is not a count reads as nothing.
TEST(ValueParts, AValueOverTheLargestOneGoesInPartsAndComesBackWhole) {
  FakeClock clock;
  FakeStore store(clock);
  FakeConnection conn(store);
  std::string big(3 * protocol::k_max_value + 17, 'x');
  big[protocol::k_max_value] = 'y';
  value_parts::put(conn, "a", big);
  value_parts::put(conn, "b", "small");
  value_parts::put(conn, "c", std::string(1, value_parts::k_head) + "starts like a head");
  conn.set("d", std::string(1, value_parts::k_head) + "99999", [] {});
  std::vector<std::optional<std::string>> got;
  std::vector<std::string> parts;
  value_parts::get_all(conn, {"a", "b", "c", "d", "e"}, [&](auto values, auto read) {
    got = std::move(values);
    parts = std::move(read);
  });
  while (conn.deliver_one()) {
  }
  clock.t += std::chrono::milliseconds(2);  // "e" is not there
  store.route(store.core.expire(clock.t));
  while (conn.deliver_one()) {
  }
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], big);
  EXPECT_EQ(got[1], "small");
  EXPECT_EQ(got[2], std::string(1, value_parts::k_head) + "starts like a head");
  EXPECT_FALSE(got[3]) << "a head naming more parts than may be";
  EXPECT_FALSE(got[4]);
  EXPECT_EQ(parts.size(), 4u + 1u) << "a's four parts and c's one";
}

TEST(ProcessUsage, AStatLineWithSpacesAndParenthesesInItsNameParses) {
  const std::string line =
      "42 (my (odd) prog) T 7 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 1 0 1000 "
      "12345678 300 18446744073709551615";
  const auto s = parse_stat(line);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, 'T');
  EXPECT_EQ(s->ppid, 7);
  EXPECT_EQ(s->ticks, 300);
  EXPECT_EQ(s->rss_pages, 300);
  EXPECT_FALSE(parse_stat("42 (cut"));
  EXPECT_FALSE(parse_stat("42 (x) R 1 2"));
}

TEST(ProcessUsage, ThisProcessTreeHasItsOwnMemory) {
  const auto usage = tree_usage({::getpid(), 999999999});
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_GT(usage[0].rss_kib, 0);
  EXPECT_GE(usage[0].processes, 1);
  EXPECT_EQ(usage[1].processes, 0) << "no such process: zeros";
}

TEST(StatusPage, ThePageNeedsNothingFromElsewhereAndTheEventsAreOneArray) {
  const std::string page(status_page_html());
  // The stylesheet and the script are inside it, not linked.
  EXPECT_EQ(page.find("href=\"page.css\""), std::string::npos);
  EXPECT_EQ(page.find("src=\"page.js\""), std::string::npos);
  EXPECT_NE(page.find("<style>"), std::string::npos);
  EXPECT_NE(page.find("function drawStatus"), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_NE(page.find("/status.json"), std::string::npos);
  std::deque<std::string> lines = {"{\"event\":\"a\"}\n", "{\"event\":\"b\"}\n"};
  const auto events = nlohmann::json::parse(events_json(lines));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["event"], "b");
  EXPECT_EQ(events_json({}), "[]");
}

// Starts "debuggers" that print a line into their output at once (the
// memory file StackCapture gives) and end when the test says.
struct FakeDebuggers : Spawner {
  std::vector<pid_t> spawn(const std::vector<WorkerSpec>&) override { return {}; }
  void signal(int, int) override {}
  void kill_all() override {}
  std::optional<Debugger> start_debugger(int local_rank,
                                         const std::vector<std::vector<std::string>>& candidates,
                                         const std::string& output_path) override {
    if (!installed) {
      return std::nullopt;
    }
    const int fd = ::open(output_path.c_str(), O_WRONLY);
    const std::string text = "frames of " + candidates.at(0).at(2) + "\n";
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
    started.push_back(local_rank);
    return Debugger{next_pid++, 0};
  }
  void stop_debugger(pid_t pid) override { stopped.push_back(pid); }
  bool installed = true;
  pid_t next_pid = 1000;
  std::vector<int> started;
  std::vector<pid_t> stopped;
};

TEST(StackCapture, TakesEachRanksStacksAFewAtATimeAndAnswersWhenAllEnded) {
  FakeClock clock;
  FakeDebuggers debuggers;
  StackCapture capture(debuggers, clock);
  std::vector<StackCapture::Target> targets;
  for (int r = 0; r < 12; ++r) {
    targets.push_back({100 + r, r, 5000 + r, "", {5000 + r}});
  }
  targets.push_back({112, 12, 5012, "exited with exit code 0", {}});
  std::optional<std::string> answer;
  capture.capture(NodeStacks{3, "", 0, std::nullopt, {}}, targets,
                  clock.now() + std::chrono::seconds(30),
                  [&answer](const NodeStacks& a) { answer = encode_node_stacks(a); });
  ASSERT_LE(capture.running(), 8u) << "a few debuggers at once, not one per rank";
  ASSERT_GE(capture.running(), 2u);
  for (pid_t pid = 1000; !answer && pid < 1100; ++pid) {
    EXPECT_TRUE(capture.on_debugger_ended(pid) || pid >= debuggers.next_pid);
  }
  EXPECT_FALSE(capture.on_debugger_ended(4242)) << "not one of its debuggers";
  ASSERT_TRUE(answer);
  const auto doc = nlohmann::json::parse(*answer);
  EXPECT_EQ(doc["node_rank"], 3);
  ASSERT_EQ(doc["ranks"].size(), 13u);
  EXPECT_EQ(doc["ranks"][0]["rank"], 100);
  EXPECT_EQ(doc["ranks"][0]["processes"][0]["stacks"], "frames of 5000\n")
      << "the debugger's output, read back from its memory file";
  EXPECT_EQ(doc["ranks"][12]["ended"], "exited with exit code 0");
  EXPECT_TRUE(doc["ranks"][12]["processes"].empty());
  EXPECT_TRUE(debuggers.stopped.empty());
}

TEST(StackCapture, ADebuggerPastItsTimeIsStoppedAndTheAnswerSaysSo) {
  FakeClock clock;
  FakeDebuggers debuggers;
  StackCapture capture(debuggers, clock);
  std::optional<std::string> answer;
  capture.capture(NodeStacks(), {{0, 0, 77, "", {77}}}, clock.now() + std::chrono::seconds(5),
                  [&answer](const NodeStacks& a) { answer = encode_node_stacks(a); });
  ASSERT_TRUE(capture.next_deadline());
  EXPECT_EQ(*capture.next_deadline(), clock.now() + std::chrono::seconds(5));
  clock.t += std::chrono::seconds(5);
  capture.on_time();
  ASSERT_EQ(debuggers.stopped, std::vector<pid_t>{1000});
  ASSERT_TRUE(answer) << "what it printed so far is read at once: its reap may never be seen "
                         "(a round's end sweeps the launcher's children)";
  EXPECT_TRUE(capture.on_debugger_ended(1000)) << "still known as one of its own once reaped";
  EXPECT_FALSE(capture.on_debugger_ended(1000));
  EXPECT_FALSE(capture.next_deadline());
  const auto p = nlohmann::json::parse(*answer)["ranks"][0]["processes"][0];
  EXPECT_NE(p["note"].get<std::string>().find("did not finish in time"), std::string::npos) << p;
}

TEST(StackCapture, WithoutADebuggerTheAnswerSaysWhatToInstall) {
  FakeClock clock;
  FakeDebuggers debuggers;
  debuggers.installed = false;
  StackCapture capture(debuggers, clock);
  std::optional<std::string> answer;
  capture.capture(NodeStacks(), {{0, 0, 77, "", {77}}}, clock.now() + std::chrono::seconds(5),
                  [&answer](const NodeStacks& a) { answer = encode_node_stacks(a); });
  ASSERT_TRUE(answer) << "nothing to wait for";
  const auto p = nlohmann::json::parse(*answer)["ranks"][0]["processes"][0];
  EXPECT_NE(p["note"].get<std::string>().find("install elfutils"), std::string::npos) << p;
}

// A process whose handler for SIGUSR2 appends its "frames" to its file in
// `dir`, as the faulthandler armed by --python-stacks-signal does; with
// `armed` false it neither catches the signal nor has a file.
int dump_fd = -1;

pid_t python_like(const std::string& dir, bool armed) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (armed) {
      const std::string path = dir + "/" + std::to_string(::getpid());
      dump_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      struct sigaction sa = {};
      sa.sa_handler = [](int) {
        const char text[] = "Current thread 0x1 (most recent call first):\n  File \"x.py\"\n";
        (void)!::write(dump_fd, text, sizeof(text) - 1);
      };
      ::sigaction(SIGUSR2, &sa, nullptr);
    }
    for (;;) {
      ::pause();
    }
  }
  return pid;
}

template <typename F>
bool wait_for(F done) {
  for (int i = 0; i < 5000; ++i) {
    if (done()) {
      return true;
    }
    ::usleep(1000);
  }
  return false;
}

bool caught_by(pid_t pid, int sig) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("SigCgt:")) {
      return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1U;
    }
  }
  return false;
}

TEST(StackCapture, AnArmedProcessWritesItsOwnFramesOnTheSignalAndAnUnarmedOneIsNotSignalled) {
  char tmpl[] = "/tmp/ddplaunch-stacks-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const pid_t armed = python_like(dir, true);
  const pid_t plain = python_like(dir, false);
  ASSERT_TRUE(wait_for([&] {
    return caught_by(armed, SIGUSR2) && std::filesystem::exists(dir + "/" + std::to_string(armed));
  }));
  FakeClock clock;
  FakeDebuggers debuggers;
  StackCapture capture(debuggers, clock);
  capture.use_python_signal(SIGUSR2, dir);
  std::optional<std::string> answer;
  capture.capture(NodeStacks(), {{0, 0, armed, "", {armed}}, {1, 1, plain, "", {plain}}},
                  clock.now() + std::chrono::seconds(30),
                  [&answer](const NodeStacks& a) { answer = encode_node_stacks(a); });
  EXPECT_EQ(debuggers.started, std::vector<int>{1})
      << "the armed one's debugger waits for its dump";
  // Its handler writes at once; the size, seen twice the same, says it is done.
  for (int i = 0; i < 500 && debuggers.started.size() < 2; ++i) {
    ::usleep(2000);
    clock.t += std::chrono::milliseconds(20);
    capture.on_time();
  }
  ASSERT_EQ(debuggers.started, (std::vector<int>{1, 0}));
  ASSERT_TRUE(capture.on_debugger_ended(1000));
  ASSERT_TRUE(capture.on_debugger_ended(1001));
  ASSERT_TRUE(answer);
  const auto doc = nlohmann::json::parse(*answer);
  const auto own = doc["ranks"][0]["processes"][0];
  EXPECT_EQ(own["stacks"].get<std::string>(),
            "Current thread 0x1 (most recent call first):\n  File \"x.py\"\n\nframes of " +
                std::to_string(armed) + "\n")
      << "its own frames, then the native ones";
  EXPECT_EQ(own["tool"], "faulthandler + eu-stack");
  EXPECT_FALSE(own.contains("note")) << own;
  EXPECT_EQ(::kill(plain, 0), 0) << "a process not catching the signal was not sent it";
  EXPECT_EQ(::waitpid(plain, nullptr, WNOHANG), 0);
  // Stopped, it is not sent the signal (it would answer only once continued).
  ASSERT_EQ(::kill(armed, SIGSTOP), 0);
  ASSERT_TRUE(wait_for([&] {
    std::ifstream stat("/proc/" + std::to_string(armed) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    return text.find(") T ") != std::string::npos;
  }));
  answer.reset();
  capture.capture(NodeStacks(), {{0, 0, armed, "", {armed}}},
                  clock.now() + std::chrono::seconds(30),
                  [&answer](const NodeStacks& a) { answer = encode_node_stacks(a); });
  ASSERT_EQ(debuggers.started.size(), 3u) << "straight to its debugger";
  ASSERT_TRUE(capture.on_debugger_ended(1002));
  ASSERT_TRUE(answer);
  const auto stopped = nlohmann::json::parse(*answer)["ranks"][0]["processes"][0];
  EXPECT_EQ(stopped["tool"], "eu-stack");
  EXPECT_NE(stopped["note"].get<std::string>().find("stopped (SIGSTOP)"), std::string::npos)
      << stopped;
  EXPECT_EQ(std::filesystem::file_size(dir + "/" + std::to_string(armed)),
            own["stacks"].get<std::string>().find("\nframes of"))
      << "nothing more written: no signal was sent";
  for (pid_t pid : {armed, plain}) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  // The next request sweeps the files of processes gone.
  capture.capture(NodeStacks(), {}, clock.now() + std::chrono::seconds(1),
                  [](const NodeStacks&) {});
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + std::to_string(armed)));
  std::filesystem::remove_all(dir);
}

TEST(PythonStacks, TheHookGoesFirstOnThePythonPathAndNamesTheSignalAndTheDirectory) {
  char tmpl[] = "/tmp/ddplaunch-stacks-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string job_dir = tmpl;
  EnvMap env = {{"PYTHONPATH", "/mine"}};
  ASSERT_TRUE(arm_python_stacks(SIGUSR2, job_dir, env));
  EXPECT_EQ(env["PYTHONPATH"], job_dir + "/python:/mine");
  std::ifstream hook(job_dir + "/python/sitecustomize.py");
  const std::string text((std::istreambuf_iterator<char>(hook)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, embedded::python_stacks_hook());  // the tree's file, unchanged
  std::ifstream conf(job_dir + "/python/stacks.conf");
  const std::string said((std::istreambuf_iterator<char>(conf)), std::istreambuf_iterator<char>());
  EXPECT_EQ(said, std::to_string(SIGUSR2) + "\n" + python_stacks_dir(job_dir));
  EXPECT_TRUE(std::filesystem::is_directory(python_stacks_dir(job_dir)));
  EnvMap none;
  EXPECT_FALSE(arm_python_stacks(SIGUSR2, job_dir + "/gone/deeper", none));
  EXPECT_FALSE(none.contains("PYTHONPATH")) << "nothing to find there";
  std::filesystem::remove_all(job_dir);
}

TEST(StackPlan, PythonFramesComeFromGdbsPyBtWhereInstalledElseANoteSaysWhatToInstall) {
  const StackPlan with = plan_stacks(42, "/usr/bin/python3.11", true);
  EXPECT_EQ(with.tools.front(), "gdb py-bt");
  EXPECT_EQ(with.candidates.front().front(), "gdb");
  EXPECT_TRUE(with.note.empty());
  const StackPlan without = plan_stacks(42, "/usr/bin/python3.11", false);
  EXPECT_EQ(without.tools.front(), "eu-stack");
  EXPECT_NE(without.note.find("install python3.11-dbg"), std::string::npos) << without.note;
  const StackPlan native = plan_stacks(42, "/opt/train", false);
  EXPECT_EQ(native.candidates.front(), (std::vector<std::string>{"eu-stack", "-p", "42"}));
  EXPECT_TRUE(native.note.empty());
  EXPECT_FALSE(is_python("/opt/train"));
}

TEST(StacksView, EachRanksProcessesInRankOrderWithoutControlCharacters) {
  StacksDocument doc;
  doc.nodes = {NodeStacks{0, "h0", 0, std::nullopt, {}}};
  doc.missing = {1};
  doc.ranks = {
      RankStacks{1, 1, 0, 8, "", {ProcessStacks{8, "/bin/x", "eu-stack", "#0 read\x1b[2J\n", "n"}}},
      RankStacks{0, 0, 0, 7, "exited with exit code 0", {}}};
  EXPECT_EQ(format_stacks(doc),
            "=== rank 0 (node 0, h0, pid 7): exited with exit code 0\n"
            "=== rank 1 (node 0, h0, pid 8) ===\n"
            "--- pid 8 /bin/x (eu-stack)\n"
            "#0 read?[2J\n"
            "note: n\n"
            "node 1 did not answer in time (lost, stopped or unreachable)\n");
}

// A node's answer goes through the store as text: the codec gives back the
// same record, and the merge marks each rank with its node, takes the job's
// size from node 0, and counts an answer of another shape as none.
TEST(StacksView, AnswersRoundTripAndMergeIntoOneDocument) {
  NodeStacks zero{0,
                  "h0",
                  2,
                  3,
                  {RankStacks{0, 0, -1, 7, "", {ProcessStacks{7, "/bin/x", "gdb", "#0 f\n", ""}}}}};
  NodeStacks two{2, "h2", 2, std::nullopt, {RankStacks{4, 0, -1, 9, "exit code 1", {}}}};
  ASSERT_EQ(decode_node_stacks(encode_node_stacks(zero)), zero);
  EXPECT_FALSE(decode_node_stacks("[1"));
  EXPECT_FALSE(decode_node_stacks(R"({"ranks":[{"rank":"one"}]})")) << "a field of the wrong type";
  EXPECT_FALSE(decode_node_stacks(R"({"ranks":{"rank":1}})")) << "ranks that are not a list";
  const StacksDocument doc = merge_stacks(
      5, {0, 1, 2, 3}, {encode_node_stacks(zero), std::nullopt, encode_node_stacks(two), "forged"},
      std::nullopt);
  EXPECT_EQ(doc.request, 5);
  EXPECT_EQ(doc.job_nnodes, 3);
  EXPECT_EQ(doc.missing, (std::vector<int>{1, 3}));
  ASSERT_EQ(doc.ranks.size(), 2u);
  EXPECT_EQ(doc.ranks[1].node_rank, 2);
  EXPECT_EQ(doc.ranks[1].ended, "exit code 1");
  ASSERT_EQ(doc.nodes.size(), 2u);
  EXPECT_TRUE(doc.nodes[0].ranks.empty()) << "a node's ranks move to the document's";
  EXPECT_EQ(decode_stacks_document(encode_stacks_document(doc)), doc);
  const StacksDocument only_2 = merge_stacks(
      6, {0, 2}, {encode_node_stacks(zero), encode_node_stacks(two)}, std::set<int>{2});
  EXPECT_EQ(only_2.job_nnodes, 3) << "node 0 answers for the job's size";
  ASSERT_EQ(only_2.ranks.size(), 1u);
  EXPECT_EQ(only_2.ranks[0].rank, 4);
}

}  // namespace
}  // namespace ddplaunch
