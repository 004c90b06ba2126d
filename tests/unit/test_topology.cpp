#include <gtest/gtest.h>

#include "topology/topology.hpp"

namespace ddplaunch {
namespace {

TEST(Topology, OneFunctionGivesEveryNodesLayout) {
  Topology t;
  t.master_addr = "10.0.0.1";
  t.master_port = 777;
  t.nodes = {NodeEntry{2, "c", "10.0.0.3", 3, 0, {}}, NodeEntry{0, "a", "10.0.0.1", 1, 0, {}},
             NodeEntry{1, "b", "10.0.0.2", 2, 0, {}}};
  assign_ranks(t);
  EXPECT_EQ(t.world_size, 6);
  struct Case {
    int node_rank, nproc, offset;
    const char* host;
  };
  for (const Case& c : {Case{0, 1, 0, "a"}, Case{1, 2, 1, "b"}, Case{2, 3, 3, "c"}}) {
    SCOPED_TRACE(c.node_rank);
    JobLayout l = layout_of(t, c.node_rank, "job", "trainer", 2);
    EXPECT_EQ(l.local_world_size, c.nproc);
    EXPECT_EQ(l.rank_offset, c.offset);
    EXPECT_EQ(l.world_size, 6);
    EXPECT_EQ(l.nnodes, 3);
    EXPECT_EQ(l.hostname, c.host);
    EXPECT_EQ(l.master_port, 777);
    EXPECT_EQ(l.role, "trainer");
    const auto& slots = t.nodes[static_cast<size_t>(c.node_rank)].workers;
    ASSERT_EQ(static_cast<int>(slots.size()), c.nproc);
    EXPECT_EQ(slots.back().rank, c.offset + c.nproc - 1);
    EXPECT_EQ(slots.back().local_rank, c.nproc - 1);
  }
  EXPECT_THROW(layout_of(t, 3, "job", "r", 0), std::out_of_range);
}

TEST(Topology, OneNodeIsTheSameShape) {
  Topology t = uniform_topology(1, 4, 0, "a", "10.0.0.1", "127.0.0.1", 5555);
  JobLayout l = layout_of(t, 0, "none", "default", 0);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.rank_offset, 0);
  EXPECT_EQ(l.nnodes, 1);
  EXPECT_EQ(l.master_addr, "127.0.0.1");
  EXPECT_EQ(l.master_port, 5555);
}

}  // namespace
}  // namespace ddplaunch
