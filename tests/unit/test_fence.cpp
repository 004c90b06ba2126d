// FenceExchange against the in-memory store: every node gets every node's
// data in node order, fences with one signature complete in turn, a node's
// requests stay four whatever the node count, and the store serves 3N
// values per fence, not N * N.
#include <gtest/gtest.h>

#include <memory>

#include "fake_store.hpp"
#include "mpi/fence.hpp"

namespace ddplaunch {
namespace {

using namespace testing_store;

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
        "ns", "all", all, n, "d" + std::to_string(n),
        [&got, n](bool ok, std::string data) { got[static_cast<size_t>(n)] = ok ? data : "!"; });
  }
  nodes.settle();
  EXPECT_EQ(got, (std::vector<std::string>{"-", "-", "-"}));
  nodes.fences[1]->enter("ns", "all", all, 1, "d1",
                         [&got](bool ok, std::string data) { got[1] = ok ? data : "!"; });
  nodes.settle();
  EXPECT_EQ(got, (std::vector<std::string>(3, "d0d1d2")));
  // The next fence of the same set is a new one, with its own data.
  for (int n = 0; n < 3; ++n) {
    nodes.fences[static_cast<size_t>(n)]->enter(
        "ns", "all", all, n, "",
        [&got, n](bool, std::string data) { got[static_cast<size_t>(n)] = "second:" + data; });
  }
  nodes.settle();
  EXPECT_EQ(got, (std::vector<std::string>(3, "second:")));
}

TEST(FenceExchange, ASubsetFencesWithoutTheOthers) {
  Nodes nodes(3);
  std::string got0, got2;
  nodes.fences[0]->enter("ns", "ab12", {0, 2}, 0, "x", [&](bool, std::string d) { got0 = d; });
  nodes.fences[2]->enter("ns", "ab12", {0, 2}, 2, "z", [&](bool, std::string d) { got2 = d; });
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
      nodes.fences[static_cast<size_t>(i)]->enter("ns", "all", all, i, "0123456789",
                                                  [&done, expected](bool ok, std::string data) {
                                                    done += ok && data.size() == expected ? 1 : 0;
                                                  });
    }
    nodes.settle();
    EXPECT_EQ(done, n);  // every node, all of the data
    int most = 0;
    int read = 0;
    int over_four = 0;
    for (const auto& c : nodes.conns) {
      most = std::max(most, c->requests);
      read += c->values_read;
      over_four += c->requests > 4 ? 1 : 0;
    }
    EXPECT_EQ(over_four, 1) << n << " nodes";  // the last to arrive, alone
    // SET, ADD, GET done, MULTI_GET the part; the last to arrive also
    // MULTI_GETs the records and SETs the part and done.
    EXPECT_LE(most, 7) << n << " nodes";
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
        [&got, i](bool ok, std::string data) { got[static_cast<size_t>(i)] = ok ? data : "!"; });
  }
  nodes.settle();
  const std::string expected =
      std::string(700 * 1024, 'a') + std::string(700 * 1024, 'b') + std::string(700 * 1024, 'c');
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(got[static_cast<size_t>(i)].size(), expected.size()) << i;
    EXPECT_TRUE(got[static_cast<size_t>(i)] == expected) << i;
  }
}

TEST(FenceExchange, AnAbandonedFenceFailsOnEveryNodeStillInIt) {
  Nodes nodes(2);
  std::vector<std::string> got(2, "-");
  nodes.fences[0]->enter("ns", "all", {0, 1}, 0, "x",
                         [&got](bool ok, std::string d) { got[0] = ok ? d : "!"; });
  nodes.settle();
  nodes.fences[0]->abandon();
  nodes.settle();
  EXPECT_EQ(got[0], "!");
}

}  // namespace
}  // namespace ddplaunch
