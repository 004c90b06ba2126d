#include "rendezvous/records.hpp"

#include <gtest/gtest.h>

#include <csignal>

#include <nlohmann/json.hpp>

namespace ddplaunch {
namespace {

JobSummary failed_job() {
  JobSummary s;
  s.run_id = "j";
  s.exit_code = 139;
  s.reason = StopReason::k_worker_failed;
  s.start_time = 100;
  s.end_time = 103;
  RankOutcome r0{0, 0, 0, "h", 10, ExitInfo::signaled(SIGTERM), true, 100, 102.5, {}};
  RankOutcome r1{1, 1, 0, "h", 11, ExitInfo::signaled(SIGSEGV), false, 100, 102, {"boom"}};
  s.root_cause = r1;
  s.ranks = {r0, r1};
  return s;
}

TEST(Summary, FailureReportNamesTheRootCauseAndEveryOtherRank) {
  std::string report = format_failure_report(failed_job());
  EXPECT_NE(report.find("rank 1 (node 0, local rank 1, host h, pid 11) killed by signal SIGSEGV"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("2.00 s after the start"), std::string::npos) << report;
  EXPECT_NE(report.find("  | boom"), std::string::npos);
  EXPECT_NE(report.find("rank 0 (node 0, local rank 0, host h, pid 10): killed by signal "
                        "SIGTERM (15) after ddplaunch stopped it"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("exit code 139"), std::string::npos);
}

TEST(Summary, SuccessHasNoReport) {
  JobSummary s;
  EXPECT_EQ(format_failure_report(s), "");
}

TEST(Summary, JsonHasEveryRank) {
  auto doc = nlohmann::json::parse(encode_summary(failed_job()));
  EXPECT_EQ(doc["exit_code"], 139);
  EXPECT_EQ(doc["stop_reason"], "worker_failed");
  EXPECT_EQ(doc["root_cause"]["rank"], 1);
  EXPECT_EQ(doc["root_cause"]["signal_name"], "SIGSEGV");
  ASSERT_EQ(doc["ranks"].size(), 2u);
  EXPECT_EQ(doc["ranks"][0]["state"], "signaled");
  EXPECT_EQ(doc["ranks"][0]["stopped_by_launcher"], true);
  EXPECT_EQ(doc["ranks"][1]["pid"], 11);
  EXPECT_DOUBLE_EQ(doc["ranks"][1]["end_time"].get<double>(), 102.0);
}

}  // namespace
}  // namespace ddplaunch
