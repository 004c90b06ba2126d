// `ddplaunch status`'s parts: a node's answers on request (StatusResponder
// over the fake store), the /proc stat parser and the screen.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fake_store.hpp"
#include "node/process_usage.hpp"
#include "output/status_view.hpp"
#include "rendezvous/status_responder.hpp"

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
  StatusResponder responder(node, [&asked](const std::string& request) {
    asked.push_back(request);
    return request == "skip" ? std::string() : "{\"n\":" + std::to_string(asked.size()) + "}";
  });
  responder.start(1);
  drain({&node});
  EXPECT_TRUE(asked.empty()) << "nothing is answered before it is asked";
  for (const char* request : {"first", "skip", "third"}) {
    asker.add(status_keys::k_seq, 1,
              [&asker, request](int64_t n) { asker.set(status_keys::request(n), request, [] {}); });
    drain({&asker, &node});
  }
  EXPECT_EQ(asked, (std::vector<std::string>{"first", "skip", "third"}));
  EXPECT_EQ(responder.answered(), 2);
  std::vector<std::optional<std::string>> got;
  for (int n : {1, 3}) {
    asker.get(status_keys::answer(n, 1), FakeConnection::Duration(1),
              [&got](std::optional<std::string> v) { got.push_back(v); });
  }
  drain({&asker});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "{\"n\":1}");
  EXPECT_EQ(got[1], "{\"n\":3}");
}

TEST(StatusResponder, ANodeThatStartsLateAwaitsTheRequestAfterTheLastOneMade) {
  FakeClock clock;
  FakeStore store(clock);
  FakeConnection node(store);
  FakeConnection asker(store);
  asker.add(status_keys::k_seq, 5, [](int64_t) {});
  asker.set(status_keys::request(5), "old", [] {});
  drain({&asker});
  std::vector<std::string> asked;
  StatusResponder responder(node, [&asked](const std::string& r) {
    asked.push_back(r);
    return "{}";
  });
  responder.start(0);
  drain({&node});
  asker.set(status_keys::request(6), "new", [] {});
  drain({&asker, &node});
  EXPECT_EQ(asked, std::vector<std::string>{"new"});
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

TEST(StatusView, TheScreenHasTheJobEveryNodeAndRankAndNamesTheSilentNodes) {
  const nlohmann::json doc = {
      {"job",
       {{"run_id", "j1"},
        {"round", 1},
        {"restarts", 1},
        {"max_restarts", 3},
        {"nnodes", 3},
        {"nnodes_expected", "3"},
        {"world_size", 6},
        {"elapsed_s", 12.5}}},
      {"nodes", {{{"node_rank", 0}, {"host", "a"}, {"addr", "10.0.0.1"}, {"state", "running"}}}},
      {"missing", {2}},
      {"ranks",
       {{{"rank", 0},
         {"node_rank", 0},
         {"pid", 11},
         {"state", "stopped"},
         {"run_s", 3.0},
         {"progress_events", 7},
         {"since_progress_s", 2.5},
         {"cpu_percent", 50.0},
         {"rss_kib", 2048},
         {"last_line", "epoch 3 loss 0.25 " + std::string(300, 'x')}}}}};
  const std::string screen = format_status(doc.dump(), 100);
  EXPECT_NE(screen.find("job j1  round 1  restarts 1/3  nodes 3 (expected 3)  world size 6"),
            std::string::npos)
      << screen;
  EXPECT_NE(screen.find("2 did not answer in time"), std::string::npos) << screen;
  EXPECT_NE(screen.find("stopped"), std::string::npos) << screen;
  EXPECT_NE(screen.find("epoch 3 loss 0.25"), std::string::npos) << screen;
  for (size_t at = 0, end; at < screen.size(); at = end + 1) {
    end = screen.find('\n', at);
    EXPECT_LE(end - at, 100u) << "cut to the width";
  }
  EXPECT_EQ(format_status("not json", 80), "status: no answer could be read\n");
}

}  // namespace
}  // namespace ddplaunch
