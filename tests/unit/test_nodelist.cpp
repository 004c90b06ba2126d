#include <gtest/gtest.h>

#include "cluster/nodelist.hpp"
#include "config/launch_error.hpp"

namespace ddplaunch {
namespace {

using Hosts = std::vector<std::string>;

TEST(Nodelist, EveryFormSlurmWrites) {
  const std::pair<const char*, Hosts> cases[] = {
      {"n01", {"n01"}},
      {"n[01-04,07]", {"n01", "n02", "n03", "n04", "n07"}},
      {"gpu-[1-2],cpu3", {"gpu-1", "gpu-2", "cpu3"}},
      {"node[8-11]", {"node8", "node9", "node10", "node11"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},
      {"rack[1-2]-n[01-02]", {"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}},
      {"a.cluster.org,b.cluster.org", {"a.cluster.org", "b.cluster.org"}},
      {"x[1,3]y.dom,z", {"x1y.dom", "x3y.dom", "z"}},
      {"[1-2]", {"1", "2"}},
  };
  for (const auto& [list, hosts] : cases) {
    EXPECT_EQ(expand_nodelist(list), hosts) << list;
    EXPECT_EQ(count_nodelist(list), hosts.size()) << list;
  }
}

TEST(Nodelist, CompressedListsExpandToTheSameHostsInTheSameOrder) {
  const std::pair<Hosts, const char*> cases[] = {
      {{"n01", "n02", "n03", "n04", "n07"}, "n[01-04,07]"},
      {{"gpu-1", "gpu-2", "cpu3"}, "gpu-[1-2],cpu3"},
      {{"node8", "node9", "node10", "node11"}, "node[8-11]"},
      {{"n098", "n099", "n100", "n101"}, "n[098-101]"},
      {{"n3", "n1", "n2"}, "n[3,1-2]"},  // node-rank order, not sorted
      {{"vm", "vm", "vm"}, "vm,vm,vm"},  // nodes sharing a host
      {{"n9", "n09"}, "n[9,09]"},
      {{"a.cluster.org", "b.cluster.org"}, "a.cluster.org,b.cluster.org"},
      {{"rack1-n01", "rack1-n02", "rack2-n01"}, "rack1-n[01-02],rack2-n01"},
      {{"x1", "x2", "y", "x3"}, "x[1-2],y,x3"},
      {{"n99999999999999999999", "n1"}, "n99999999999999999999,n1"},  // too long a number
  };
  for (const auto& [hosts, list] : cases) {
    EXPECT_EQ(compress_nodelist(hosts), list);
    EXPECT_EQ(expand_nodelist(compress_nodelist(hosts)), hosts) << list;
  }
  Hosts many;
  for (int i = 1; i <= 16384; ++i) {
    const std::string n = std::to_string(i);
    many.push_back("gpu" + std::string(5 - n.size(), '0') + n);
  }
  EXPECT_EQ(compress_nodelist(many), "gpu[00001-16384]");
  EXPECT_EQ(compress_nodelist({"a", "b[1]"}), "") << "not writable in the syntax";
  EXPECT_EQ(compress_nodelist({"a", ""}), "");
}

TEST(Nodelist, MalformedListsAreClearErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"n[01-04", "without its ']'"},
      {"n01-04]", "']' without"},
      {"n[4-1]", "low to high"},
      {"n[a-b]", "not a number"},
      {"n[1-1000000000]", "million"},
      // Found by fuzz_nodelist: the product of two groups was built before the check.
      {"14,0,0n,0,0n[00-326367][00-326367]", "million"},
      {"a[0-600000],b[0-600000]", "million"},
      {"a,,b", "empty host"},
      {"", "empty host"},
  };
  for (const auto& [list, part] : cases) {
    try {
      expand_nodelist(list);
      ADD_FAILURE() << list;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--master-addr"), std::string::npos) << e.what();
    }
    EXPECT_THROW(count_nodelist(list), UsageError) << "counted as checked: " << list;
  }
}

TEST(Nodelist, TasksPerNode) {
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("1"), (std::vector<int>{1}));
  EXPECT_EQ(expand_tasks_per_node("4,2"), (std::vector<int>{4, 2}));
  EXPECT_THROW(expand_tasks_per_node("2(x"), UsageError);
  EXPECT_THROW(expand_tasks_per_node("x"), UsageError);
}

}  // namespace
}  // namespace ddplaunch
