#include <gtest/gtest.h>

#include "rendezvous/planner.hpp"

namespace ddplaunch {
namespace {

JoinRecord node(int arrival, int node_rank, int nproc = 2, bool store_host = false) {
  JoinRecord r;
  r.run_id = "job";
  r.command = "train.py --lr 1";
  r.nnodes = 3;
  r.nproc = nproc;
  r.node_rank = node_rank;
  r.host = "h" + std::to_string(arrival);
  r.addr = "10.0.0." + std::to_string(arrival);
  r.store_host = store_host;
  r.arrival = arrival;
  return r;
}

TEST(Planner, RefusesWhatDisagreesWithTheJob) {
  struct Case {
    const char* name;
    JoinRecord (*make)();
    const char* message_part;
  };
  const Case cases[] = {
      {"nnodes",
       [] {
         auto r = node(1, 1);
         r.nnodes = 4;
         return r;
       },
       "node 1 (h1, 10.0.0.1) has --nnodes 4 but node 0 has --nnodes 3"},
      {"command",
       [] {
         auto r = node(1, 1);
         r.command = "train.py --lr 2";
         return r;
       },
       "node 1 (h1, 10.0.0.1) runs 'train.py --lr 2' but node 0 runs 'train.py --lr 1'"},
      {"run id",
       [] {
         auto r = node(1, 1);
         r.run_id = "other";
         return r;
       },
       "has --rdzv-id other but node 0 has job"},
      {"version",
       [] {
         auto r = node(1, -1);
         r.version = 1;
         return r;
       },
       "the node that joined 2nd (h1, 10.0.0.1) speaks rendezvous version 1"},
      {"rank twice", [] { return node(1, 0); },
       "node rank 0 is claimed twice: by node 0 (h0, 10.0.0.0) and by node 0 (h1, 10.0.0.1)"},
      {"rank range", [] { return node(1, 7); }, "claims node rank 7, out of range"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    RendezvousPlanner p(node(0, 0, 2, true));
    ASSERT_FALSE(p.add(node(0, 0, 2, true)));
    auto error = p.add(c.make());
    ASSERT_TRUE(error);
    EXPECT_NE(error->find(c.message_part), std::string::npos) << *error;
  }
}

TEST(Planner, SaysWhoIsMissing) {
  RendezvousPlanner explicit_ranks(node(0, 0, 2, true));
  explicit_ranks.add(node(0, 0, 2, true));
  explicit_ranks.add(node(1, 2));
  EXPECT_EQ(explicit_ranks.missing(), "node 1");
  EXPECT_FALSE(explicit_ranks.complete());

  RendezvousPlanner automatic(node(0, -1, 2, true));
  automatic.add(node(0, -1, 2, true));
  EXPECT_EQ(automatic.missing(), "2 nodes");
}

TEST(Planner, AssignsRanksAndBuildsTheTopology) {
  struct Case {
    const char* name;
    std::vector<JoinRecord> arrivals;
    std::vector<int> rank_of_arrival;
    std::vector<int> first_ranks;  // by node rank
  };
  const Case cases[] = {
      {"explicit, any order",
       {node(0, 2, 1), node(1, 0, 2, true), node(2, 1, 3)},
       {2, 0, 1},
       {0, 2, 5}},
      {"automatic: the store host is 0, others by arrival",
       {node(0, -1, 1), node(1, -1, 2, true), node(2, -1, 3)},
       {1, 0, 2},
       {0, 2, 3}},
      {"automatic around a claimed rank 0",
       {node(0, -1, 1, true), node(1, 0, 2), node(2, -1, 1)},
       {1, 0, 2},
       {0, 2, 3}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    RendezvousPlanner p(c.arrivals[1]);
    for (const auto& r : c.arrivals) {
      ASSERT_FALSE(p.add(r));
    }
    ASSERT_TRUE(p.complete());
    JobPlan plan = p.plan("10.0.0.1", 555);
    EXPECT_EQ(plan.node_rank_of_arrival, c.rank_of_arrival);
    ASSERT_EQ(plan.topology.nodes.size(), 3u);
    int total = 0;
    for (size_t n = 0; n < 3; ++n) {
      const auto& e = plan.topology.nodes[n];
      EXPECT_EQ(e.node_rank, static_cast<int>(n));
      EXPECT_EQ(e.first_rank, c.first_ranks[n]);
      ASSERT_EQ(static_cast<int>(e.workers.size()), e.nproc);
      EXPECT_EQ(e.workers.front().rank, e.first_rank);
      total += e.nproc;
    }
    EXPECT_EQ(plan.topology.world_size, total);
    EXPECT_EQ(plan.topology.master_port, 555);
  }
}

}  // namespace
}  // namespace ddplaunch
