#include <gtest/gtest.h>

#include "config/hosts.hpp"
#include "config/launch_error.hpp"

namespace ddplaunch {
namespace {

using List = std::vector<HostSlots>;

TEST(Hosts, ListsAsMpirunTakesThem) {
  const std::pair<const char*, List> cases[] = {
      {"a:4,b:4", {{"a", 4}, {"b", 4}}},
      {"a,b", {{"a", std::nullopt}, {"b", std::nullopt}}},
      {"a:2,a:2", {{"a", 4}}},
      {"a,a", {{"a", 2}}},
      {" a:1 , b ", {{"a", 1}, {"b", std::nullopt}}},
      {"10.0.0.1:8,node-2.lab.org", {{"10.0.0.1", 8}, {"node-2.lab.org", std::nullopt}}},
  };
  for (const auto& [text, hosts] : cases) {
    EXPECT_EQ(parse_host_list(text, "--hosts"), hosts) << text;
  }
}

TEST(Hosts, BadListsNameTheFlagAndTheItem) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "names no host"},
      {",,", "names no host"},
      {"a:0", "'a:0' has no valid slot count"},
      {"a:x", "'a:x' has no valid slot count"},
      {"a:5000", "'a:5000' has no valid slot count"},
      {"a b", "'a b' is not a host name"},
      {"-a", "'-a' is not a host name"},
      {"a;rm -rf /", "is not a host name"},
  };
  for (const auto& [text, message] : cases) {
    try {
      parse_host_list(text, "--hosts");
      ADD_FAILURE() << text;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("--hosts", 0), 0U) << e.what();
    }
  }
}

TEST(Hosts, HostfilesOfMpirunAndDeepSpeed) {
  const std::pair<const char*, List> cases[] = {
      {"node0 slots=4\nnode1 slots=4\n", {{"node0", 4}, {"node1", 4}}},
      {"# lab\n\nworker-1 slots=2  # comment\n  worker-2 slots=1 max_slots=8\r\n",
       {{"worker-1", 2}, {"worker-2", 1}}},
      {"a\nb:3\n", {{"a", std::nullopt}, {"b", 3}}},
      {"a slots=1\na slots=2\n", {{"a", 3}}},
      {"a\tslots=2", {{"a", 2}}},
  };
  for (const auto& [text, hosts] : cases) {
    EXPECT_EQ(parse_hostfile(text, "hf"), hosts) << text;
  }
}

TEST(Hosts, BadHostfileLinesNameTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "hf names no host"},
      {"# only a comment\n", "hf names no host"},
      {"a slots=0\n", "hf line 1: 'slots=0' needs a count"},
      {"a\nb slots\n", "hf line 2: 'slots' needs a count"},
      {"a cpus=4\n", "hf line 1: unknown 'cpus=4'"},
      {"a/b slots=1\n", "hf line 1: 'a/b' is not a host name"},
  };
  for (const auto& [text, message] : cases) {
    try {
      parse_hostfile(text, "hf");
      ADD_FAILURE() << text;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ddplaunch
