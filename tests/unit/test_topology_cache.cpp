#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "mpi/topology_cache.hpp"
#include "scratch_dir.hpp"

namespace ddplaunch {
namespace {

namespace fs = std::filesystem;

// A machine as /proc and /sys show it, under the scratch directory.
void fake_machine(const ScratchDir& dir) {
  dir.write("proc/self/status",
            "Name:\tddplaunch\nCpus_allowed:\tff\nCpus_allowed_list:\t0-7\n"
            "Mems_allowed_list:\t0-1\nvoluntary_ctxt_switches:\t3\n");
  dir.write("proc/sys/kernel/random/boot_id", "0b7e5c1a-boot\n");
  dir.write("sys/devices/system/cpu/online", "0-7\n");
  dir.mkdir("sys/bus/pci/devices/0000:00:02.0");
  dir.mkdir("sys/bus/pci/devices/0000:00:01.0");
  dir.mkdir("sys/class/net/lo");  // virtual: no device
  dir.mkdir("sys/class/net/eth0/device");
  dir.mkdir("sys/class/net/ib0/device");
}

std::string fingerprint(const ScratchDir& dir) {
  return topology_fingerprint(0x20800, dir / "proc", dir / "sys");
}

TEST(TopologyCache, TheFingerprintNamesWhatTheTopologyDependsOn) {
  ScratchDir dir("topology-cache-test");
  fake_machine(dir);
  const std::string key = fingerprint(dir);
  EXPECT_NE(key.find("hwloc=133120"), std::string::npos) << key;
  EXPECT_NE(key.find("boot=0b7e5c1a-boot;"), std::string::npos) << key;
  EXPECT_NE(key.find("cpus=0-7;"), std::string::npos) << key;
  EXPECT_NE(key.find("mems=0-1;"), std::string::npos) << key;
  EXPECT_NE(key.find("online=0-7;"), std::string::npos) << key;
  EXPECT_NE(key.find("pci=0000:00:01.0 0000:00:02.0;"), std::string::npos) << key;  // sorted
  EXPECT_NE(key.find("net=eth0 ib0"), std::string::npos)
      << key;  // not lo: hwloc shows no virtual one
  EXPECT_EQ(key.find('\n'), std::string::npos);
  EXPECT_EQ(fingerprint(dir), key);  // the same machine, the same key
}

TEST(TopologyCache, WhatChangesTheTopologyChangesTheFingerprint) {
  ScratchDir dir("topology-cache-test");
  fake_machine(dir);
  const std::string before = fingerprint(dir);
  dir.mkdir("sys/bus/pci/devices/0000:3b:00.0");  // a GPU hot-plugged
  const std::string gpu = fingerprint(dir);
  EXPECT_NE(gpu, before);
  dir.mkdir("sys/class/net/veth7a3");  // a container's interface: the same topology
  EXPECT_EQ(fingerprint(dir), gpu);
  dir.mkdir("sys/class/net/eth1/device");  // a NIC's: another topology
  EXPECT_NE(fingerprint(dir), gpu);
  const std::string nic = fingerprint(dir);
  dir.write("proc/self/status", "Cpus_allowed_list:\t0-3\nMems_allowed_list:\t0-1\n");  // a cgroup
  EXPECT_NE(fingerprint(dir), nic);
  const std::string cgroup = fingerprint(dir);
  dir.write("proc/sys/kernel/random/boot_id", "another-boot\n");
  EXPECT_NE(fingerprint(dir), cgroup);
  EXPECT_NE(topology_fingerprint(0x20900, dir / "proc", dir / "sys"), fingerprint(dir));
}

TEST(TopologyCache, WhatIsWrittenIsReadBackForTheSameFingerprintOnly) {
  ScratchDir dir("topology-cache-test");
  const std::string path = dir / "topology.xml";
  const std::string xml = "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n</topology>\n";
  EXPECT_FALSE(read_cached_topology(path, "key"));  // none yet
  ASSERT_TRUE(write_cached_topology(path, "key", xml));
  EXPECT_EQ(read_cached_topology(path, "key"), xml);
  EXPECT_FALSE(read_cached_topology(path, "other key"));
  EXPECT_FALSE(read_cached_topology(path, "ke"));  // a prefix is not the key
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(write_cached_topology(path, "new key", "<topology/>"));  // replaced whole
  EXPECT_EQ(read_cached_topology(path, "new key"), "<topology/>");
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(path).parent_path()), {}), 1)
      << "no temporary file is left";
}

TEST(TopologyCache, AFileOthersCouldHaveWrittenIsNotTrusted) {
  ScratchDir dir("topology-cache-test");
  const std::string path = dir / "topology.xml";
  ASSERT_TRUE(write_cached_topology(path, "key", "<topology/>"));
  ::chmod(path.c_str(), 0666);
  EXPECT_FALSE(read_cached_topology(path, "key"));
  ::chmod(path.c_str(), 0620);
  EXPECT_FALSE(read_cached_topology(path, "key"));
  ::chmod(path.c_str(), 0644);  // readable by others is fine: a topology is no secret
  EXPECT_TRUE(read_cached_topology(path, "key"));

  const std::string link = dir / "link.xml";  // a link planted where the cache goes
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_FALSE(read_cached_topology(link, "key"));
  dir.mkdir("dir.xml");
  EXPECT_FALSE(read_cached_topology(dir / "dir.xml", "key"));
  dir.write("headless.xml", "<topology/>");  // no header line at all
  EXPECT_FALSE(read_cached_topology(dir / "headless.xml", "<topology/>"));
}

TEST(TopologyCache, TheUserSteeringHwlocOrLibpmixTurnsTheCacheOff) {
  EXPECT_TRUE(topology_cache_enabled({}));
  EXPECT_TRUE(topology_cache_enabled({{"DDPLAUNCH_TOPOLOGY_CACHE", "1"}}));
  EXPECT_FALSE(topology_cache_enabled({{"DDPLAUNCH_TOPOLOGY_CACHE", "0"}}));
  EXPECT_FALSE(topology_cache_enabled({{"DDPLAUNCH_TOPOLOGY_CACHE", "off"}}));
  for (const char* name : {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_FSROOT", "HWLOC_COMPONENTS",
                           "HWLOC_PLUGINS_BLACKLIST", "PMIX_MCA_pmix_hwloc_topo_file"}) {
    EXPECT_FALSE(topology_cache_enabled({{name, "x"}})) << name;
  }
  EXPECT_NE(topology_cache_path().find("/ddplaunch-topology-" + std::to_string(::geteuid())),
            std::string::npos);
}

}  // namespace
}  // namespace ddplaunch
