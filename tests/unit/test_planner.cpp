#include <gtest/gtest.h>

#include "rendezvous/planner.hpp"

namespace ddplaunch {
namespace {

JoinRecord node(int arrival, int node_rank, int nproc = 2, bool store_host = false) {
  JoinRecord r;
  r.run_id = "job";
  r.argv = {"train.py", "--lr", "1"};
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
    bool whole_job;  // false: that node alone is refused, the job goes on waiting
  };
  const Case cases[] = {
      {"nnodes",
       [] {
         auto r = node(1, 1);
         r.nnodes = 4;
         return r;
       },
       "node 1 (h1, 10.0.0.1) has --nnodes 4 but node 0 has --nnodes 3", true},
      {"command",
       [] {
         auto r = node(1, 1);
         r.argv = {"train.py", "--lr", "2"};
         return r;
       },
       "node 1 (h1, 10.0.0.1) runs 'train.py --lr 2' but node 0 runs 'train.py --lr 1'", false},
      {"the same words, split otherwise",
       [] {
         auto r = node(1, 1);
         r.argv = {"train.py", "--lr 1"};
         return r;
       },
       "runs 'train.py \"--lr 1\"' but node 0 runs 'train.py --lr 1'", false},
      {"run id",
       [] {
         auto r = node(1, 1);
         r.run_id = "other";
         return r;
       },
       "has --rdzv-id other but node 0 has job", true},
      {"version",
       [] {
         auto r = node(1, -1);
         r.version = 1;
         return r;
       },
       "the node that joined 2nd (h1, 10.0.0.1) speaks rendezvous version 1", true},
      {"rank twice", [] { return node(1, 0); },
       "node rank 0 is claimed twice: by node 0 (h0, 10.0.0.0) and by node 0 (h1, 10.0.0.1)", true},
      {"rank range", [] { return node(1, 7); }, "claims node rank 7, out of range", true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    RendezvousPlanner p(node(0, 0, 2, true));
    ASSERT_FALSE(p.add(node(0, 0, 2, true)));
    auto refusal = p.add(c.make());
    ASSERT_TRUE(refusal);
    EXPECT_NE(refusal->message.find(c.message_part), std::string::npos) << refusal->message;
    EXPECT_EQ(refusal->whole_job, c.whole_job);
    EXPECT_EQ(p.joined(), 1) << "a refused node is not counted";
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
    RoundAssignment plan = p.plan("10.0.0.1", 555);
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

TEST(Planner, TheJobIdIsTheStoreHostsWhateverTheOthersDrew) {
  JoinRecord host = node(0, -1, 2, true);
  host.job_id = "node0draw";
  RendezvousPlanner p(host);
  for (int a = 0; a < 3; ++a) {
    JoinRecord r = a == 0 ? host : node(a, -1);
    if (a != 0) {
      r.job_id = "other" + std::to_string(a);
    }
    ASSERT_FALSE(p.add(r));
  }
  EXPECT_EQ(p.plan("10.0.0.1", 555).topology.job_id, "node0draw");
}

JoinRecord elastic_node(int arrival, int node_rank = -1, bool store_host = false) {
  JoinRecord r = node(arrival, node_rank, 2, store_host);
  r.nnodes_min = 2;
  r.nnodes = 4;
  return r;
}

TEST(Planner, AnElasticJobStartsWithMinNodesAndMakesClaimedRanksContiguous) {
  RendezvousPlanner p(elastic_node(0, -1, true));
  ASSERT_TRUE(p.elastic());
  ASSERT_FALSE(p.add(elastic_node(0, -1, true)));
  EXPECT_FALSE(p.enough());
  EXPECT_EQ(p.missing(), "1 node");
  ASSERT_FALSE(p.add(elastic_node(1, 3)));  // claims 3 of 0..3: rank 1 of 2 nodes
  EXPECT_TRUE(p.enough());
  EXPECT_FALSE(p.complete()) << "MAX is 4";
  auto other = elastic_node(2);
  other.nnodes = 5;
  ASSERT_TRUE(p.add(other));
  EXPECT_NE(p.add(other)->message.find("has --nnodes 2:5 but node 0 has --nnodes 2:4"),
            std::string::npos);
  RoundAssignment plan = p.plan("10.0.0.0", 1);
  EXPECT_EQ(plan.node_rank_of_arrival, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.topology.nnodes(), 2);
  EXPECT_EQ(plan.topology.world_size, 4);
}

TEST(Planner, ANodeThatFailedItsHealthCheckDoesNotJoin) {
  const std::string why = "'nvidia-smi' failed with exit code 9: no devices";
  {  // a fixed-size job ends at once, naming the node and the check
    RendezvousPlanner p(node(0, 0, 2, true));
    ASSERT_FALSE(p.add(node(0, 0, 2, true)));
    auto sick = node(1, 1);
    sick.health = why;
    const auto refusal = p.add(sick);
    ASSERT_TRUE(refusal);
    EXPECT_TRUE(refusal->whole_job);
    EXPECT_EQ(refusal->message, "node 1 (h1, 10.0.0.1) failed its health check: " + why);
  }
  {  // an elastic job goes on without it
    RendezvousPlanner p(elastic_node(0, -1, true));
    ASSERT_FALSE(p.add(elastic_node(0, -1, true)));
    auto sick = elastic_node(1);
    sick.health = why;
    const auto refusal = p.add(sick);
    ASSERT_TRUE(refusal);
    EXPECT_FALSE(refusal->whole_job);
    ASSERT_FALSE(p.add(elastic_node(2)));
    EXPECT_TRUE(p.enough()) << "the healthy nodes form the job";
  }
  {  // node 0 hosts the store: its failure ends even an elastic job
    auto sick = elastic_node(0, -1, true);
    sick.health = why;
    RendezvousPlanner p(sick);
    const auto refusal = p.add(sick);
    ASSERT_TRUE(refusal);
    EXPECT_TRUE(refusal->whole_job);
  }
  {  // a stranger is a stranger first
    RendezvousPlanner p(node(0, 0, 2, true));
    ASSERT_FALSE(p.add(node(0, 0, 2, true)));
    auto other = node(1, 1);
    other.argv = {"other.py"};
    other.health = why;
    const auto refusal = p.add(other);
    ASSERT_TRUE(refusal);
    EXPECT_FALSE(refusal->whole_job);
  }
}

TEST(Planner, ElasticRoundsDropLostNodesAndAdmitWaitingOnesUpToMax) {
  RendezvousPlanner p(elastic_node(0, -1, true));
  for (int a = 0; a < 3; ++a) {
    ASSERT_FALSE(p.add(elastic_node(a, -1, a == 0)));
  }
  p.plan("10.0.0.0", 1);
  EXPECT_FALSE(p.can_grow());
  // Three nodes join while round 0 runs: they wait.
  for (int a = 3; a < 6; ++a) {
    ASSERT_FALSE(p.add(elastic_node(a)));
  }
  auto bad = elastic_node(6);
  bad.argv = {"other.py"};
  auto refused = p.add(bad);
  ASSERT_TRUE(refused) << "a node that disagrees is refused, not queued";
  EXPECT_FALSE(refused->whole_job) << "the job runs: that node alone is told";
  EXPECT_EQ(p.waiting().size(), 3u);
  EXPECT_TRUE(p.can_grow());
  // Node 1 was lost; arrival 3 went away while it waited.
  EXPECT_EQ(p.remaining({1}), 2);
  RoundAssignment next = p.next_round({1}, {3}, "10.0.0.0", 2);
  EXPECT_EQ(next.topology.nnodes(), 4) << "MAX";
  EXPECT_EQ(next.admitted, (std::vector<int>{4, 5}));
  // A spare takes the lost node's place (arrival 4 -> rank 1), so the
  // survivors keep their ranks (arrivals 0 and 2 -> 0 and 2); the other
  // newcomer follows; arrival 1 (lost) and 3 (left) have none.
  EXPECT_EQ(next.node_rank_of_arrival, (std::vector<int>{0, -1, 2, -1, 1, 3}));
  EXPECT_EQ(next.topology.nodes[1].host, "h4");
  EXPECT_EQ(next.replaced, (std::vector<NodeReplacement>{{1, "h1", "h4"}}));
  EXPECT_EQ(next.topology.master_port, 2);
  EXPECT_FALSE(p.can_grow());
  EXPECT_TRUE(p.drop_waiting().empty());
  // A fixed-size job's next round is the same nodes.
  RendezvousPlanner fixed(node(0, -1, 2, true));
  for (int a = 0; a < 3; ++a) {
    ASSERT_FALSE(fixed.add(node(a, -1, 2, a == 0)));
  }
  RoundAssignment first = fixed.plan("10.0.0.0", 1);
  RoundAssignment again = fixed.next_round({}, {}, "10.0.0.0", 7);
  EXPECT_EQ(again.node_rank_of_arrival, first.node_rank_of_arrival);
  EXPECT_EQ(again.topology.nodes, first.topology.nodes);
}

// Hot spares: more nodes than MAX. The extra ones wait; each lost member's
// place goes to the next spare, the job stays at MAX, and a lost node
// without a spare left shrinks it.
TEST(Planner, SparesTakeTheLostNodesPlacesAndTheJobStaysAtMax) {
  RendezvousPlanner p(elastic_node(0, -1, true));
  for (int a = 0; a < 4; ++a) {
    ASSERT_FALSE(p.add(elastic_node(a, -1, a == 0)));
  }
  p.plan("10.0.0.0", 1);
  ASSERT_FALSE(p.add(elastic_node(4)));
  ASSERT_FALSE(p.add(elastic_node(5)));
  EXPECT_FALSE(p.can_grow()) << "at MAX: they are spares";
  RoundAssignment next = p.next_round({0, 2}, {}, "10.0.0.0", 2);
  EXPECT_EQ(next.topology.nnodes(), 4);
  EXPECT_EQ(next.node_rank_of_arrival, (std::vector<int>{-1, 1, -1, 3, 0, 2}));
  EXPECT_EQ(next.replaced, (std::vector<NodeReplacement>{{0, "h0", "h4"}, {2, "h2", "h5"}}));
  EXPECT_TRUE(p.waiting().empty());
  RoundAssignment after = p.next_round({1}, {}, "10.0.0.0", 3);
  EXPECT_EQ(after.topology.nnodes(), 3) << "no spare left: the job shrinks";
  EXPECT_TRUE(after.replaced.empty());
}

// Four agents of a 2-node job start at once: whichever of them hosts the
// store (its arrival anywhere in 0..3) is added first and is node 0; the
// first other arrival is node 1; the rest are refused alone, and every
// arrival index the plan holds is one that joined.
TEST(Planner, MoreArrivalsThanNodesInEveryOrder) {
  for (int host = 0; host < 4; ++host) {
    SCOPED_TRACE("the store host joined as arrival " + std::to_string(host));
    auto make = [host](int a) {
      JoinRecord r = node(a, -1, 2, a == host);
      r.nnodes = 2;
      return r;
    };
    RendezvousPlanner p(make(host));
    ASSERT_FALSE(p.add(make(host)));
    std::vector<int> refused;
    for (int a = 0; a < 4; ++a) {
      if (a == host) {
        continue;
      }
      if (auto refusal = p.add(make(a))) {
        EXPECT_FALSE(refusal->whole_job);
        EXPECT_NE(refusal->message.find("more agents joined than --nnodes 2"), std::string::npos);
        refused.push_back(a);
      }
    }
    ASSERT_TRUE(p.complete());
    EXPECT_EQ(refused.size(), 2u);
    RoundAssignment plan = p.plan("10.0.0.0", 1);
    const int other = host == 0 ? 1 : 0;
    ASSERT_GT(plan.node_rank_of_arrival.size(), static_cast<size_t>(std::max(host, other)));
    EXPECT_EQ(plan.node_rank_of_arrival[static_cast<size_t>(host)], 0);
    EXPECT_EQ(plan.node_rank_of_arrival[static_cast<size_t>(other)], 1);
    for (int a : refused) {
      EXPECT_TRUE(static_cast<size_t>(a) >= plan.node_rank_of_arrival.size() ||
                  plan.node_rank_of_arrival[static_cast<size_t>(a)] == -1);
    }
    // One more once the job runs: refused alone, never queued.
    auto late = p.add(make(4));
    ASSERT_TRUE(late);
    EXPECT_FALSE(late->whole_job);
    EXPECT_TRUE(p.waiting().empty());
  }
}

}  // namespace
}  // namespace ddplaunch
