// FenceExchange against the in-memory store: every node gets every node's
// data in node order, fences with one signature complete in turn, a node's
// requests stay four whatever the node count, and the store serves 3N
// values per fence, not N * N.
#include <gtest/gtest.h>

#include <memory>

#include "fake_store.hpp"
#include "mpi/fence.hpp"
#include "mpi/pmix_job.hpp"

namespace ddplaunch {
namespace {

using namespace testing_store;
using Outcome = FenceExchange::Outcome;
constexpr auto k_ok = Outcome::k_ok;

struct Nodes {
  FakeClock clock;
  FakeStore store{clock};
  std::vector<std::unique_ptr<FakeConnection>> conns;
  std::vector<std::unique_ptr<FenceExchange>> fences;
  explicit Nodes(int n) {
    for (int i = 0; i < n; ++i) {
      conns.push_back(std::make_unique<FakeConnection>(store));
      fences.push_back(std::make_unique<FenceExchange>(*conns.back()));
    }
  }
  void settle() {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& c : conns) {
        while (c->deliver_one()) {
          moved = true;
        }
      }
    }
  }
};

TEST(FenceExchange, EveryNodeGetsEveryRecordInNodeOrder) {
  Nodes nodes(3);
  std::vector<std::string> got(3, "-");
  const std::vector<int> all = {0, 1, 2};
  // Node 1 arrives last: nobody completes before it.
  for (int n : {2, 0}) {
    nodes.fences[static_cast<size_t>(n)]->enter(
        "ns", "all", all, n, "d" + std::to_string(n), [&got, n](Outcome o, std::string data) {
          got[static_cast<size_t>(n)] = o == k_ok ? data : "!";
        });
  }
  nodes.settle();
  EXPECT_EQ(got, (std::vector<std::string>{"-", "-", "-"}));
  nodes.fences[1]->enter("ns", "all", all, 1, "d1",
                         [&got](Outcome o, std::string data) { got[1] = o == k_ok ? data : "!"; });
  nodes.settle();
  EXPECT_EQ(got, (std::vector<std::string>(3, "d0d1d2")));
  // The next fence of the same set is a new one, with its own data.
  for (int n = 0; n < 3; ++n) {
    nodes.fences[static_cast<size_t>(n)]->enter(
        "ns", "all", all, n, "",
        [&got, n](Outcome, std::string data) { got[static_cast<size_t>(n)] = "second:" + data; });
  }
  nodes.settle();
  EXPECT_EQ(got, (std::vector<std::string>(3, "second:")));
}

TEST(FenceExchange, ASubsetFencesWithoutTheOthers) {
  Nodes nodes(3);
  std::string got0, got2;
  nodes.fences[0]->enter("ns", "ab12", {0, 2}, 0, "x", [&](Outcome, std::string d) { got0 = d; });
  nodes.fences[2]->enter("ns", "ab12", {0, 2}, 2, "z", [&](Outcome, std::string d) { got2 = d; });
  nodes.settle();
  EXPECT_EQ(got0, "xz");
  EXPECT_EQ(got2, "xz");
}

TEST(FenceExchange, ANodesRequestsAndTheStoresReadsGrowNoFasterThanTheNodeCount) {
  for (int n : {2, 64, 1024}) {
    Nodes nodes(n);
    std::vector<int> all(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      all[static_cast<size_t>(i)] = i;
    }
    int done = 0;
    const auto expected = static_cast<size_t>(10 * n);
    for (int i = 0; i < n; ++i) {
      nodes.fences[static_cast<size_t>(i)]->enter(
          "ns", "all", all, i, "0123456789", [&done, expected](Outcome o, std::string data) {
            done += o == k_ok && data.size() == expected ? 1 : 0;
          });
    }
    nodes.settle();
    EXPECT_EQ(done, n);  // every node, all of the data
    int most = 0;
    int read = 0;
    int over_six = 0;
    for (const auto& c : nodes.conns) {
      most = std::max(most, c->requests);
      read += c->values_read;
      over_six += c->requests > 6 ? 1 : 0;
    }
    // The last to arrive and the last to be done (one node or two).
    EXPECT_GE(over_six, 1) << n << " nodes";
    EXPECT_LE(over_six, 2) << n << " nodes";
    // SET, ADD, GET done, MULTI_GET the part, DELETE its record, ADD itself
    // out; the last to arrive also MULTI_GETs the records and SETs the part
    // and done; the last out DELETEs the part, the counters and done.
    EXPECT_LE(most, 13) << n << " nodes";
    EXPECT_EQ(read, 3 * n) << n << " nodes";  // each record once; done and the part once a node
  }
}

TEST(FenceExchange, DataOverOneValueTravelsInPartsTheDoneKeyNames) {
  const int n = 3;
  Nodes nodes(n);
  const std::vector<int> all = {0, 1, 2};
  std::vector<std::string> got(n);
  // 3 x 700 KiB: over the store's 1 MiB per value, in two parts.
  for (int i = 0; i < n; ++i) {
    nodes.fences[static_cast<size_t>(i)]->enter(
        "ns", "all", all, i, std::string(700 * 1024, static_cast<char>('a' + i)),
        [&got, i](Outcome o, std::string data) {
          got[static_cast<size_t>(i)] = o == k_ok ? data : "!";
        });
  }
  nodes.settle();
  const std::string expected =
      std::string(700 * 1024, 'a') + std::string(700 * 1024, 'b') + std::string(700 * 1024, 'c');
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(got[static_cast<size_t>(i)].size(), expected.size()) << i;
    EXPECT_TRUE(got[static_cast<size_t>(i)] == expected) << i;
  }
}

TEST(FenceExchange, TheStoreHoldsAsManyKeysAfterTenThousandFencesAsAfterTen) {
  const int n = 3;
  Nodes nodes(n);
  const std::vector<int> all = {0, 1, 2};
  const size_t before = nodes.store.core.keys();
  int ok = 0;
  auto fences = [&](int count) {
    for (int f = 0; f < count; ++f) {
      for (int i = 0; i < n; ++i) {
        nodes.fences[static_cast<size_t>(i)]->enter("ns", "all", all, i, std::to_string(i),
                                                    [&ok](Outcome o, const std::string& data) {
                                                      ok += o == k_ok && data == "012" ? 1 : 0;
                                                    });
      }
      nodes.settle();
    }
  };
  fences(10);
  const size_t after_ten = nodes.store.core.keys();
  fences(10000 - 10);
  EXPECT_EQ(ok, 10000 * n);
  EXPECT_EQ(nodes.store.core.keys(), after_ten);
  EXPECT_EQ(after_ten, before);  // no fence leaves a key behind
  // Parts too: data over one value leaves nothing either.
  for (int i = 0; i < n; ++i) {
    nodes.fences[static_cast<size_t>(i)]->enter("ns", "all", all, i, std::string(700 * 1024, 'x'),
                                                [](Outcome, const std::string&) {});
  }
  nodes.settle();
  EXPECT_EQ(nodes.store.core.keys(), before);
}

TEST(FenceExchange, AFailedFenceLeavesNoKeyBehind) {
  const int n = 2;
  Nodes nodes(n);
  int failed = 0;
  nodes.fences[0]->enter("ns", "all", {0, 1}, 0, "a",
                         [&failed](Outcome o, const std::string&) { failed += o == k_ok ? 0 : 1; });
  nodes.settle();
  // The store loses node 0's record: the gatherer finds it missing.
  nodes.conns[1]->erase(fence_keys("ns", "all", 0, {0, 1}).records[0], [] {});
  nodes.fences[1]->enter("ns", "all", {0, 1}, 1, "b",
                         [&failed](Outcome o, const std::string&) { failed += o == k_ok ? 0 : 1; });
  nodes.settle();
  EXPECT_EQ(failed, 2);
  EXPECT_EQ(nodes.store.core.keys(), 0U);
}

TEST(FenceExchange, AnAbandonedFenceFailsOnEveryNodeStillInIt) {
  Nodes nodes(2);
  std::vector<std::string> got(2, "-");
  nodes.fences[0]->enter("ns", "all", {0, 1}, 0, "x",
                         [&got](Outcome o, std::string d) { got[0] = o == k_ok ? d : "!"; });
  nodes.settle();
  nodes.fences[0]->abandon();
  nodes.settle();
  EXPECT_EQ(got[0], "!");
}

}  // namespace
}  // namespace ddplaunch
