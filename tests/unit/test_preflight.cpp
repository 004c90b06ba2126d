// The network preflight: which nodes probe whom (pure), the lines a blocked
// path becomes, and ReachProbe's connects against real loopback sockets.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <set>

#include "agent/reach_probe.hpp"
#include "posix/net.hpp"
#include "rendezvous/preflight.hpp"
#include "rendezvous/records.hpp"

namespace ddplaunch {
namespace {

TEST(PreflightPeers, SmallJobsAreAllToAll) {
  EXPECT_EQ(preflight_peers(0, 2), (std::vector<int>{1}));
  EXPECT_EQ(preflight_peers(2, 4), (std::vector<int>{3, 0, 1}));
  EXPECT_EQ(preflight_peers(5, 17).size(), 16u);
  EXPECT_TRUE(preflight_peers(0, 1).empty());
  EXPECT_TRUE(preflight_peers(3, 3).empty()) << "a rank outside the job";
}

TEST(PreflightPeers, LargeJobsProbeABoundedCirculantSample) {
  for (const int n : {18, 64, 1000, 16384}) {
    std::vector<int> in(static_cast<size_t>(n), 0);
    size_t most = 0;
    for (int r = 0; r < n; ++r) {
      const auto peers = preflight_peers(r, n);
      most = std::max(most, peers.size());
      EXPECT_EQ(std::set<int>(peers.begin(), peers.end()).size(), peers.size()) << n;
      for (const int p : peers) {
        EXPECT_NE(p, r);
        ++in[static_cast<size_t>(p)];
      }
    }
    EXPECT_LE(most, 30u) << n;
    // Every node is probed by as many nodes as it probes.
    EXPECT_EQ(*std::min_element(in.begin(), in.end()), *std::max_element(in.begin(), in.end()));
  }
  EXPECT_EQ(preflight_peers(0, 64),
            (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 32}));
}

TEST(PreflightPeers, AtMostAboutAThousandNodesProbeMasterPort) {
  EXPECT_FALSE(probes_master_port(0, 4)) << "node 0 itself";
  EXPECT_TRUE(probes_master_port(3, 4));
  int probers = 0;
  for (int r = 0; r < 16384; ++r) {
    probers += probes_master_port(r, 16384) ? 1 : 0;
  }
  EXPECT_GT(probers, 1000);
  EXPECT_LE(probers, 1024);
}

TEST(Preflight, ABlockedPathIsOneLineNamingBothNodesTheAddressAndThePort) {
  const ProbeFailure f{{2, "c", "10.0.0.3", 41234, false}, "connection refused"};
  EXPECT_EQ(describe_blocked(1, "b", f),
            "node 1 (b) cannot reach node 2 (c) at 10.0.0.3:41234 (its probe port, on the "
            "address gloo and NCCL use): connection refused");
  const ProbeFailure m{{0, "a", "fd00::1", 29500, true}, "no answer"};
  EXPECT_EQ(describe_blocked(3, "d", m),
            "node 3 (d) cannot reach node 0 (a) at [fd00::1]:29500 (MASTER_PORT, where rank 0's "
            "store will listen): no answer");
}

TEST(Preflight, ItsRecordsRoundTripAndAreChecked) {
  const ProbeEndpoint e{"h", "10.0.0.1", 4000, 29500};
  EXPECT_EQ(decode_probe_endpoint(encode_probe_endpoint(e)), e);
  EXPECT_THROW(decode_probe_endpoint(R"({"host":"h","addr":"a","port":70000,"master_port":0})"),
               RecordError);
  EXPECT_THROW(decode_probe_endpoint("{}"), RecordError);
  const ProbeReport lines{{"one", "two \xff"}, 3};
  const ProbeReport read = decode_probe_report(encode_probe_report(lines));
  EXPECT_EQ(read.blocked.at(0), "one");
  EXPECT_EQ(read.more, 3);
  EXPECT_EQ(decode_probe_report(encode_probe_report({})), ProbeReport{});
  EXPECT_THROW(decode_probe_report(R"({"blocked":[1]})"), RecordError);
  EXPECT_THROW(decode_probe_report(R"({"blocked":[],"more":-1})"), RecordError);
  EXPECT_THROW(decode_probe_report(R"({"blocked":[],"more":"x"})"), RecordError);
  ProbeReport many;
  for (int i = 0; i < 70; ++i) {
    many.blocked.push_back("x");
  }
  EXPECT_THROW(decode_probe_report(encode_probe_report(many)), RecordError) << "over the bound";
}

// A subtree's report keeps its first lines and counts the rest: a firewall
// that blocks every path of 16,384 nodes costs node 0 one bounded record
// from each of its children.
TEST(Preflight, AReportKeepsItsFirstLinesAndCountsTheRest) {
  ProbeReport r;
  add_to_report(r, std::vector<std::string>(60, "a"));
  add_to_report(r, std::vector<std::string>(10, "b"), 100);
  EXPECT_EQ(r.blocked.size(), ProbeReport::k_report_lines);
  EXPECT_EQ(r.blocked.back(), "b");
  EXPECT_EQ(r.more, 106);
}

// --- ReachProbe, on loopback ---------------------------------------------------

// Drives `probe` as the Driver does until it is done.
std::optional<std::vector<ProbeFailure>> drive(
    ReachProbe& probe, std::vector<ProbeTarget> targets,
    std::chrono::seconds timeout = std::chrono::seconds(10)) {
  std::optional<std::vector<ProbeFailure>> result;
  probe.start(std::move(targets), std::chrono::steady_clock::now() + timeout,
              [&](std::vector<ProbeFailure> f) { result = std::move(f); });
  while (!result && probe.fd() >= 0) {
    pollfd p{probe.fd(), POLLIN, 0};
    ::poll(&p, 1, 1000);
    probe.on_ready(std::chrono::steady_clock::now());
    probe.on_time(std::chrono::steady_clock::now());
  }
  return result;
}

int closed_port() {
  posix::Fd fd = posix::listen_tcp("127.0.0.1", 0);
  return posix::local_port(fd.get());  // closed as it returns
}

TEST(ReachProbe, AProbePortAnswersWithoutAcceptingAndAClosedOneIsRefused) {
  ReachProbe there;
  const int port = there.listen_on();
  const int closed = closed_port();
  ReachProbe probe;
  auto failures = drive(probe, {{1, "b", "127.0.0.1", port, false},
                                {1, "b", "127.0.0.1", port, false},
                                {2, "c", "127.0.0.1", closed, false}});
  ASSERT_TRUE(failures);
  ASSERT_EQ(failures->size(), 1u);
  EXPECT_EQ(failures->at(0).target.port, closed);
  EXPECT_NE(failures->at(0).error.find("connection refused"), std::string::npos);
  EXPECT_EQ(probe.fd(), -1) << "nothing left in flight";
}

TEST(ReachProbe, AHeldPortAnswersUntilReleased) {
  ReachProbe node0;
  const int port = closed_port();
  ASSERT_TRUE(node0.hold_port(port));
  ReachProbe probe;
  EXPECT_EQ(drive(probe, {{0, "a", "127.0.0.1", port, true}}), std::vector<ProbeFailure>{});
  ReachProbe other;
  EXPECT_FALSE(other.hold_port(port)) << "held already";
  node0.release();
  auto failures = drive(probe, {{0, "a", "127.0.0.1", port, true}});
  ASSERT_TRUE(failures);
  EXPECT_EQ(failures->size(), 1u);
  posix::Fd rebound = posix::listen_tcp("", port);  // rank 0's store can bind it now
  EXPECT_TRUE(rebound);
}

TEST(ReachProbe, ConnectsNotEndedByTheDeadlineFailAsUnanswered) {
  ReachProbe there;
  const int port = there.listen_on();
  ReachProbe probe;
  std::optional<std::vector<ProbeFailure>> result;
  const auto start = std::chrono::steady_clock::now();
  probe.start({{1, "b", "127.0.0.1", port, false}}, start + std::chrono::seconds(3),
              [&](std::vector<ProbeFailure> f) { result = std::move(f); });
  ASSERT_EQ(probe.deadline(), start + std::chrono::seconds(3));
  probe.on_time(start + std::chrono::seconds(3));  // before on_ready() heard it
  ASSERT_TRUE(result);
  ASSERT_EQ(result->size(), 1u);
  EXPECT_NE(result->at(0).error.find("no answer within 3 s"), std::string::npos)
      << result->at(0).error;
  EXPECT_EQ(probe.fd(), -1);
}

}  // namespace
}  // namespace ddplaunch
