// The tree of agents' shape (topology/tree.hpp) and the fence through it
// (mpi/tree_fence.hpp) over in-memory stores: node 0's is the job's store,
// each interior node has its own; every node gets every node's data in node
// order, each store serves the result to its own children only, failures
// travel with their reason, and no store keeps a fence's keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>

#include "fake_store.hpp"
#include "mpi/tree_fence.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {
namespace {

using namespace testing_store;
using Outcome = TreeFence::Outcome;

TEST(TreeShape, SevenNodesOfFanOutTwo) {
  EXPECT_EQ(tree_place(0, 7, 2).children, (std::vector<int>{1, 4}));
  EXPECT_EQ(tree_place(1, 7, 2).children, (std::vector<int>{2, 3}));
  EXPECT_EQ(tree_place(4, 7, 2).children, (std::vector<int>{5, 6}));
  EXPECT_EQ(tree_place(6, 7, 2).parent, 4);
  EXPECT_EQ(tree_place(6, 7, 2).depth, 2);
  EXPECT_EQ(tree_place(6, 7, 2).parent_children, 2);
  EXPECT_EQ(tree_place(0, 7, 2).parent, -1);
  EXPECT_EQ(tree_place(0, 7, 2).subtree, 7);
  EXPECT_EQ(tree_place(4, 7, 2).subtree, 3);
  EXPECT_EQ(tree_place(0, 1, 16).children, std::vector<int>{});
  EXPECT_EQ(tree_height(1, 16), 0);
  EXPECT_EQ(tree_height(17, 16), 1);
  EXPECT_EQ(tree_height(18, 16), 2);
  EXPECT_EQ(tree_height(16384, 16), 4);
}

// Every node is its parent's child once, each subtree a run of node ranks
// that its children's runs fill after it, no node has more than F children,
// and the deepest is tree_height() down.
TEST(TreeShape, EverySubtreeIsARunOfNodeRanksInEveryShape) {
  for (int f : {2, 3, 16, 64}) {
    for (int n : {1, 2, 3, 17, 18, 100, 1000}) {
      int deepest = 0;
      for (int node = 0; node < n; ++node) {
        const TreePlace p = tree_place(node, n, f);
        deepest = std::max(deepest, p.depth);
        EXPECT_LE(static_cast<int>(p.children.size()), f);
        int next = node + 1;
        for (const int c : p.children) {
          EXPECT_EQ(c, next) << n << "/" << f << " node " << node;
          const TreePlace cp = tree_place(c, n, f);
          EXPECT_EQ(cp.parent, node);
          EXPECT_EQ(cp.parent_children, static_cast<int>(p.children.size()));
          next += cp.subtree;
        }
        EXPECT_EQ(next, node + p.subtree) << n << "/" << f << " node " << node;
      }
      EXPECT_EQ(deepest, tree_height(n, f)) << n << "/" << f;
    }
  }
}

// A node's links over the in-memory stores: `own` is its store (node 0's
// is the job's), `parent` its parent's.
class FakeLinks : public TreeLinks {
 public:
  FakeLinks(FakeStore* own, FakeStore* parent)
      : down_conn(own ? std::make_unique<FakeConnection>(*own) : nullptr),
        up_conn(parent ? std::make_unique<FakeConnection>(*parent) : nullptr) {}
  void begin(const std::string&, int node, int nnodes, int fanout) override {
    m_place = tree_place(node, nnodes, fanout);
  }
  const TreePlace& place() const override { return m_place; }
  StoreConnection* down() override { return m_place.children.empty() ? nullptr : down_conn.get(); }
  void up(Ready ready) override { ready(up_conn.get(), up_conn ? "" : "no parent"); }
  void on_lost(Lost lost) override { m_lost = std::move(lost); }
  // The link to its parent's store is cut.
  void lose(const std::string& why) {
    up_conn->fail(StoreConnection::Failure::k_lost, why);
    m_lost(why);
  }

  std::unique_ptr<FakeConnection> down_conn;
  std::unique_ptr<FakeConnection> up_conn;

 private:
  TreePlace m_place;
  Lost m_lost;
};

struct Tree {
  FakeClock clock;
  int n, f;
  std::vector<std::unique_ptr<FakeStore>> stores;  // by node: its own (interior and root)
  std::vector<std::unique_ptr<FakeLinks>> links;
  std::vector<std::unique_ptr<TreeFence>> fences;
  std::vector<std::string> got;
  std::vector<int> ended;
  Tree(int nodes, int fanout) : n(nodes), f(fanout), got(nodes, "-"), ended(nodes, 0) {
    for (int i = 0; i < n; ++i) {
      stores.push_back(tree_place(i, n, f).children.empty() ? nullptr
                                                            : std::make_unique<FakeStore>(clock));
    }
    for (int i = 0; i < n; ++i) {
      const TreePlace p = tree_place(i, n, f);
      links.push_back(std::make_unique<FakeLinks>(
          stores[static_cast<size_t>(i)].get(),
          p.parent >= 0 ? stores[static_cast<size_t>(p.parent)].get() : nullptr));
      fences.push_back(std::make_unique<TreeFence>(*links.back()));
    }
  }
  void enter(int i, std::string data, const std::string& nspace = "ns") {
    fences[static_cast<size_t>(i)]->enter(
        nspace, "all", i, n, f, std::move(data), [this, i](Outcome o, std::string d) {
          ++ended[static_cast<size_t>(i)];
          got[static_cast<size_t>(i)] = o == Outcome::k_ok ? d : "!";
        });
  }
  void settle() {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& l : links) {
        for (auto* c : {l->down_conn.get(), l->up_conn.get()}) {
          while (c != nullptr && c->deliver_one()) {
            moved = true;
          }
        }
      }
    }
  }
  // Requests parked on every store.
  size_t parked() const {
    size_t count = 0;
    for (const auto& s : stores) {
      for (const auto& conn : s ? s->conns : std::map<int, FakeConnection*>{}) {
        count += s->core.parked(conn.first);
      }
    }
    return count;
  }
  size_t keys_held() const {
    size_t keys = 0;
    for (const auto& s : stores) {
      keys += s ? s->core.keys() : 0;
    }
    return keys;
  }
};

std::string all_of(int n) {
  std::string all;
  for (int i = 0; i < n; ++i) {
    all += "d" + std::to_string(i);
  }
  return all;
}

TEST(TreeFence, EveryNodeGetsEveryNodesDataInNodeOrderWhateverOrderTheyEnter) {
  for (int f : {2, 3, 16}) {
    const int n = 40;
    Tree tree(n, f);
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::reverse(order.begin(), order.end());
    std::rotate(order.begin(), order.begin() + 7, order.end());
    for (size_t k = 0; k < order.size(); ++k) {
      tree.enter(order[k], "d" + std::to_string(order[k]));
      tree.settle();
      if (k + 1 < order.size()) {
        EXPECT_EQ(tree.got[0], "-") << "the root completed with a node missing";
      }
    }
    EXPECT_EQ(tree.got, std::vector<std::string>(n, all_of(n))) << "fan-out " << f;
    EXPECT_EQ(tree.keys_held(), 0U) << "fan-out " << f;
    // The next fence of the round is a new one, with its own data.
    for (int i = 0; i < n; ++i) {
      tree.enter(i, "");
    }
    tree.settle();
    EXPECT_EQ(tree.got, std::vector<std::string>(n, ""));
    EXPECT_EQ(tree.ended, std::vector<int>(n, 2));
  }
}

// Fences of two sets of ranks, both on every node, entered in one order on
// some nodes and the other on the rest, each end with its own set's data.
TEST(TreeFence, TwoSetsOfRanksFenceApartInWhateverOrderEachNodeEntersThem) {
  const int n = 7, f = 2;
  Tree tree(n, f);
  std::vector<std::string> a(n), b(n);
  auto enter = [&](int i, const std::string& set, std::vector<std::string>& into) {
    tree.fences[static_cast<size_t>(i)]->enter(
        "ns", set, i, n, f, set + std::to_string(i),
        [&into, i](Outcome, std::string d) { into[static_cast<size_t>(i)] = d; });
  };
  for (int i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      enter(i, "A", a);
      enter(i, "B", b);
    } else {
      enter(i, "B", b);
      enter(i, "A", a);
    }
  }
  tree.settle();
  EXPECT_EQ(a, std::vector<std::string>(n, "A0A1A2A3A4A5A6"));
  EXPECT_EQ(b, std::vector<std::string>(n, "B0B1B2B3B4B5B6"));
  EXPECT_EQ(tree.keys_held(), 0U);
}

// Each store serves the result to its own children: node 0's to its F,
// not to every node; a node reads its parent's record once.
TEST(TreeFence, EachStoreServesTheResultToItsChildrenOnly) {
  const int n = 64, f = 4;
  Tree tree(n, f);
  for (int i = 0; i < n; ++i) {
    tree.enter(i, std::string(100, 'x'));
  }
  tree.settle();
  int reads_of_root = 0;
  for (int i = 1; i < n; ++i) {
    const TreePlace p = tree_place(i, n, f);
    const int read = tree.links[static_cast<size_t>(i)]->up_conn->values_read;
    // Its result's head, the GET after the WAIT for... none: only the head.
    EXPECT_EQ(read, 1) << "node " << i;
    reads_of_root += p.parent == 0 ? read : 0;
    EXPECT_EQ(tree.got[static_cast<size_t>(i)].size(), 100U * n);
  }
  EXPECT_EQ(reads_of_root, f);
}

TEST(TreeFence, DataOverOneValueTravelsInParts) {
  const int n = 5, f = 2;
  Tree tree(n, f);
  // 5 x 700 KiB: every subtree of two nodes or more is over 1 MiB.
  std::string expected;
  for (int i = 0; i < n; ++i) {
    expected += std::string(700 * 1024, static_cast<char>('a' + i));
  }
  for (int i = 0; i < n; ++i) {
    tree.enter(i, std::string(700 * 1024, static_cast<char>('a' + i)));
  }
  tree.settle();
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(tree.got[static_cast<size_t>(i)] == expected) << i;
  }
  EXPECT_EQ(tree.keys_held(), 0U);
}

// A leaf whose data is over what a fence carries fails, and the failure
// travels up to the root and down to every node.
TEST(TreeFence, AFailureBelowEndsEveryNodesFence) {
  const int n = 7, f = 2;
  Tree tree(n, f);
  for (int i = 0; i < n; ++i) {
    tree.enter(i, i == 6 ? std::string(16 * 1024 * 1024, 'x') : "d");
  }
  tree.settle();
  EXPECT_EQ(tree.got, std::vector<std::string>(n, "!"));
  EXPECT_EQ(tree.ended, std::vector<int>(n, 1));
  EXPECT_EQ(tree.keys_held(), 0U) << "a failed fence leaves keys behind";
}

// An interior node that could not open its store fails the fence for every
// node instead of sending up its own data without its children's (its
// children learn it from its address record, AgentTree's).
TEST(TreeFence, AnInteriorNodeWithoutAStoreFailsTheFenceEverywhere) {
  const int n = 7, f = 2;
  Tree tree(n, f);
  tree.links[1]->down_conn.reset();
  for (int i : {0, 1, 4, 5, 6}) {
    tree.enter(i, "d");
  }
  tree.settle();
  EXPECT_EQ(tree.ended, (std::vector<int>{1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(tree.got, (std::vector<std::string>{"!", "!", "-", "-", "!", "!", "!"}));
}

// An interior node's loss: its children's links to it fail, their fences
// end naming it; the round's end (abandon) ends everyone else's, once.
TEST(TreeFence, ALostParentEndsItsChildrensFencesAndTheRoundsEndTheRest) {
  const int n = 7, f = 2;
  Tree tree(n, f);
  for (int i : {0, 2, 3, 4, 5, 6}) {  // node 1 never enters: it is lost
    tree.enter(i, "d");
  }
  tree.settle();
  EXPECT_EQ(tree.ended, std::vector<int>(n, 0));
  for (int child : {2, 3}) {
    tree.links[static_cast<size_t>(child)]->lose("node " + std::to_string(child) +
                                                 " lost its link to node 1");
  }
  tree.settle();
  EXPECT_EQ(tree.ended, (std::vector<int>{0, 0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(tree.got[2], "!");
  EXPECT_GT(tree.parked(), 0U);  // node 0's WAIT for node 1, and node 4's children's GETs
  for (auto& fence : tree.fences) {
    fence->abandon();
  }
  tree.settle();
  EXPECT_EQ(tree.parked(), 0U) << "the round's end leaves requests parked";
  EXPECT_EQ(tree.ended, (std::vector<int>{1, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(tree.got, (std::vector<std::string>{"!", "-", "!", "!", "!", "!", "!"}));
}

}  // namespace
}  // namespace ddplaunch
