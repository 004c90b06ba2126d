// DirectModex against the in-memory store: a rank's data comes from the node
// that hosts it, requests wait for that node to serve, and a node that stops
// serving leaves no request parked.
#include <gtest/gtest.h>

#include <memory>

#include "fake_store.hpp"
#include "mpi/dmodex.hpp"

namespace ddplaunch {
namespace {

using namespace testing_store;
using namespace std::chrono_literals;

constexpr StoreConnection::Duration k_wait = 600s;

struct Pair {
  FakeClock clock;
  FakeStore store{clock};
  FakeConnection a{store};
  FakeConnection b{store};
  DirectModex asking{a};
  DirectModex serving{b};
  void settle() {
    while (a.deliver_one() || b.deliver_one()) {
    }
  }
};

TEST(DirectModex, ARanksDataComesFromItsNodeOnceItServes) {
  Pair p;
  std::vector<std::string> got;
  p.asking.request("ns", 0, 1, 3, k_wait,
                   [&got](bool ok, std::string d) { got.push_back(ok ? d : "!"); });
  p.asking.request("ns", 0, 1, 2, k_wait,
                   [&got](bool ok, std::string d) { got.push_back(ok ? d : "!"); });
  p.settle();
  EXPECT_TRUE(got.empty());  // node 1 has no worker in MPI_Init yet
  std::vector<int> asked;
  p.serving.serve("ns", 1, [&asked](int rank, DirectModex::Reply answer) {
    asked.push_back(rank);
    answer(rank == 3, rank == 3 ? "data-of-3" : "");
  });
  p.settle();
  EXPECT_EQ(asked, (std::vector<int>{3, 2}));
  EXPECT_EQ(got, (std::vector<std::string>{"data-of-3", "!"}));
}

TEST(DirectModex, StoppingReleasesTheParkedWatch) {
  Pair p;
  int asked = 0;
  p.serving.serve("ns", 1, [&asked](int, DirectModex::Reply answer) {
    ++asked;
    answer(true, "x");
  });
  p.settle();
  EXPECT_FALSE(p.b.idle());  // its queue's next slot, parked
  p.serving.stop_serving();
  p.settle();
  EXPECT_TRUE(p.b.idle());
  EXPECT_EQ(asked, 0);
}

TEST(DirectModex, ANodeThatNeverServesIsNoDataAfterTheTimeout) {
  Pair p;
  std::vector<std::string> got;
  p.asking.request("ns", 0, 1, 3, 5s,
                   [&got](bool ok, std::string d) { got.push_back(ok ? d : "!"); });
  p.settle();
  p.clock.t += 4999ms;
  p.store.route(p.store.core.expire(p.clock.t));
  p.settle();
  EXPECT_TRUE(got.empty());
  p.clock.t += 1ms;
  p.store.route(p.store.core.expire(p.clock.t));
  p.settle();
  EXPECT_EQ(got, std::vector<std::string>{"!"});
}

}  // namespace
}  // namespace ddplaunch
