#include <fmt/format.h>
#include <gtest/gtest.h>

#include <csignal>
#include <nlohmann/json.hpp>

#include "output/reports.hpp"
#include "rendezvous/records.hpp"

namespace ddplaunch {
namespace {

JobSummary failed_job() {
  JobSummary s;
  s.run_id = "j";
  s.exit_code = 139;
  s.reason = StopReason::k_worker_failed;
  s.start_time = 100;
  s.end_time = 103;
  RankOutcome r0{0, 0, 0, "h", 10, ExitInfo::signaled(SIGTERM), true, 100, 102.5, {}, {}};
  RankOutcome r1{1, 1, 0, "h", 11, ExitInfo::signaled(SIGSEGV), false, 100, 102, {"boom"}, {}};
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

TEST(Summary, TheRootCausesExceptionComesBeforeItsStderr) {
  JobSummary s;
  s.exit_code = 1;
  s.reason = StopReason::k_worker_failed;
  s.root_cause =
      RankOutcome{3,
                  1,
                  1,
                  "b",
                  7,
                  ExitInfo::exited(1),
                  false,
                  0,
                  1,
                  {"noise"},
                  WorkerError{"ValueError: nan", "Traceback\n  line\nValueError: nan\n", "1"}};
  const std::string report = format_failure_report(s);
  const auto raised = report.find("rank 3 raised ValueError: nan\n  | Traceback\n  |   line\n");
  ASSERT_NE(raised, std::string::npos) << report;
  EXPECT_LT(raised, report.find("  | noise")) << report;
}

TEST(Summary, AStderrTailThatIsTheErrorFilesTracebackIsNotShownTwice) {
  JobSummary s;
  s.exit_code = 1;
  s.reason = StopReason::k_worker_failed;
  const WorkerError error{"ValueError: nan", "Traceback\n  line\nValueError: nan\n", "1"};
  s.root_cause = RankOutcome{3,     1,
                             1,     "b",
                             7,     ExitInfo::exited(1),
                             false, 0,
                             1,     {"Traceback", "  line", "ValueError: nan"},
                             error};
  std::string report = format_failure_report(s);
  EXPECT_EQ(report.find("last lines of rank 3's stderr"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 3's stderr ends with that traceback"), std::string::npos) << report;
  s.root_cause->last_stderr.push_back("CUDA error: device-side assert");  // says more
  report = format_failure_report(s);
  EXPECT_NE(report.find("last lines of rank 3's stderr, beside that traceback:\n"
                        "  | CUDA error: device-side assert\n"),
            std::string::npos)
      << report;
  // The traceback itself once: under "raised", not again with the tail.
  const auto count = [&report](std::string_view what) {
    size_t n = 0;
    for (size_t at = report.find(what); at != std::string::npos; at = report.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("  |   line\n"), 1U) << report;
  EXPECT_EQ(count("  | ValueError: nan\n"), 1U) << report;
}

// 64 ranks on 4 nodes fail with the same NCCL error after rank 5 did; 16
// more are stopped. The report names rank 5 first, then folds the others.
JobSummary alike_failures() {
  JobSummary s;
  s.exit_code = 1;
  s.reason = StopReason::k_worker_failed;
  const std::vector<std::string> nccl = {"noise",
                                         "NCCL WARN Net : Connection closed by remote peer",
                                         "RuntimeError: NCCL error: remote process exited"};
  for (int rank = 0; rank < 80; ++rank) {
    RankOutcome o;
    o.rank = rank;
    o.local_rank = rank % 20;
    o.node_rank = rank / 20;
    o.host = fmt::format("n{}", rank / 20);
    o.pid = 100 + rank;
    if (rank < 64 || rank == 70) {
      o.exit = ExitInfo::exited(1);
      o.last_stderr = rank == 5 ? nccl : fold_tail(nccl);
    } else {
      o.exit = ExitInfo::signaled(SIGTERM);
      o.stopped_by_launcher = true;
    }
    s.ranks.push_back(o);
  }
  s.ranks[48].last_stderr = {"CUDA error: an illegal memory access"};
  s.root_cause = s.ranks[5];
  return s;
}

TEST(Summary, RanksThatFailedAlikeAreOneLineAndTheirLastLinesAreShownOnce) {
  const std::string report = format_failure_report(alike_failures());
  const auto root = report.find("job failed: rank 5 (node 0, local rank 5, host n0, pid 105)");
  const auto folded = report.find(
      "ddplaunch:   ranks 0-4,6-47,49-63,70 (nodes 0-3): exited with exit code 1\n"
      "ddplaunch:     their last lines: the same as rank 5's\n");
  ASSERT_NE(root, std::string::npos) << report;
  ASSERT_NE(folded, std::string::npos) << report;
  EXPECT_LT(root, folded) << "the root cause comes first";
  size_t count = 0;
  for (auto at = report.find("Connection closed"); at != std::string::npos;
       at = report.find("Connection closed", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << report;
  EXPECT_NE(report.find("ddplaunch:   rank 48 (node 2, local rank 8, host n2, pid 148): exited "
                        "with exit code 1\n    | CUDA error: an illegal memory access\n"),
            std::string::npos)
      << report;
  EXPECT_NE(
      report.find("ddplaunch:   ranks 64-69,71-79 (node 3, host n3): killed by signal SIGTERM (15) "
                  "after ddplaunch stopped it\n"),
      std::string::npos)
      << report;
}

TEST(Summary, EachNodeKeepsABoundedTailOfItsRanksThatFailedByThemselves) {
  std::vector<RankOutcome> ranks(40);
  for (int i = 0; i < 40; ++i) {
    ranks[i].rank = i;
    ranks[i].exit = i == 1 ? ExitInfo::signaled(SIGKILL) : ExitInfo::exited(i == 0 ? 0 : 1);
    ranks[i].stopped_by_launcher = i == 1 || i == 2;
    ranks[i].last_stderr = {"a", "b", "c", "d", std::string(300, 'x') + "é"};
  }
  ranks[3].last_stderr.back() = std::string(159, 'y') + "é";  // 2 bytes across the cut
  keep_fold_tails(ranks);
  EXPECT_TRUE(ranks[0].last_stderr.empty()) << "it succeeded";
  EXPECT_TRUE(ranks[1].last_stderr.empty()) << "ddplaunch's own signal";
  EXPECT_EQ(ranks[2].last_stderr, (std::vector<std::string>{"c", "d", std::string(160, 'x')}))
      << "stopped, but it exited with a code of its own";
  EXPECT_EQ(ranks[3].last_stderr.back(), std::string(159, 'y')) << "cut at a character's start";
  size_t bytes = 0;
  for (const auto& o : ranks) {
    for (const auto& line : o.last_stderr) {
      bytes += line.size();
    }
  }
  EXPECT_LE(bytes, k_fold_node_bytes);
  EXPECT_TRUE(ranks[39].last_stderr.empty()) << "past the node's bound";
}

TEST(Summary, SuccessHasNoReport) {
  JobSummary s;
  EXPECT_EQ(format_failure_report(s), "");
}

TEST(Records, SummaryHasEveryRank) {
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

namespace ddplaunch {
namespace {

TEST(Records, EveryStoreRecordRoundTrips) {
  JoinRecord join{2,
                  "job",
                  {"train.py", "--x", "a b"},
                  3,
                  2,
                  4,
                  -1,
                  "host",
                  "10.0.0.3",
                  {7001, 7002},
                  true,
                  2,
                  1,
                  "'check' failed with exit code 1: no GPU"};
  EXPECT_EQ(decode_join(encode_join(join)), join);

  Topology t = uniform_topology(2, 3, 1, "b", "10.0.0.2", "10.0.0.1", 999);
  auto back = decode_plan(encode_plan(TopologyRecord{t, ""}));
  ASSERT_TRUE(back.topology);
  EXPECT_EQ(back.topology->world_size, 6);
  EXPECT_EQ(back.topology->master_addr, "10.0.0.1");
  EXPECT_EQ(back.topology->master_port, 999);
  EXPECT_EQ(back.topology->sizes, (std::vector<SizeRun>{{3, 2}}));
  EXPECT_TRUE(back.topology->nodes.empty()) << "each node knows its own entry; the plan has sizes";
  Topology with_ports = t;
  with_ports.nodes[0].host = "a";
  with_ports.nodes[0].addr = "10.0.0.1";
  for (auto& n : with_ports.nodes) {  // --env-style tf reserved ports: TF_CONFIG lists them all
    for (auto& w : n.workers) {
      w.port = 7000 + w.rank;
    }
  }
  EXPECT_EQ(*decode_plan(encode_plan(TopologyRecord{with_ports, ""})).topology, with_ports);
  Topology with_job = t;
  with_job.job_id = "0123456789abcdef";  // every node's PMIx namespace names it
  EXPECT_EQ(decode_plan(encode_plan(TopologyRecord{with_job, ""})).topology->job_id,
            "0123456789abcdef");
  with_job.job_id = std::string(65, 'x');
  EXPECT_THROW(decode_plan(encode_plan(TopologyRecord{with_job, ""})), RecordError);
  auto failed = decode_plan(encode_plan(TopologyRecord{std::nullopt, "timed out"}));
  EXPECT_FALSE(failed.topology);
  EXPECT_EQ(failed.error, "timed out");
  EXPECT_EQ(decode_assignment(encode_assignment(4095)), 4095);
  auto round_plan = decode_plan(encode_plan(TopologyRecord{t, "", 2}));
  EXPECT_EQ(round_plan.restarts, 2) << "a node admitted late learns the restarts used";
  TopologyRecord spared{t, "", 1};
  spared.replaced = {{1, "b", "c"}};
  spared.preflight = true;
  auto spared_back = decode_plan(encode_plan(spared));
  EXPECT_EQ(spared_back.replaced, spared.replaced);
  EXPECT_TRUE(spared_back.preflight);
  EXPECT_FALSE(round_plan.preflight);
  std::string short_one = encode_plan(spared);
  short_one.replace(short_one.find(R"([1,"b","c"])"), 11, R"([1,"b"])");
  EXPECT_THROW(decode_plan(short_one), RecordError);
  EXPECT_EQ(decode_admission(encode_admission(Admission{3, ""})).round, 3);
  EXPECT_EQ(decode_admission(encode_admission(Admission{0, "ended"})).error, "ended");
  EXPECT_THROW(decode_admission(R"({"round":0})"), RecordError);
  JobVerdict regroup{0, "node 3 joined", std::nullopt, 0, -1, true};
  EXPECT_EQ(decode_verdict(encode_verdict(regroup)), regroup);
  EXPECT_FALSE(regroup.success());
  JobVerdict preempted{75, "node 1 received SIGUSR1 from Slurm", std::nullopt, 1};
  preempted.preempt = SIGUSR1;
  preempted.preempt_delivered = true;
  EXPECT_EQ(decode_verdict(encode_verdict(preempted)), preempted);
  EXPECT_THROW(decode_assignment(R"({"node_rank":"1"})"), RecordError);
  // rdzv/plan/<arrival>: a rank, a refusal, or wait; a member's answer is the
  // same text as encode_assignment, and a negative rank is malformed.
  for (const JoinAnswer& a : {JoinAnswer{3, "", false}, JoinAnswer{-1, "refused: too many", false},
                              JoinAnswer{-1, "", true}, JoinAnswer{-1, "", true, true}}) {
    EXPECT_EQ(decode_answer(encode_answer(a)), a);
  }
  EXPECT_EQ(encode_answer(JoinAnswer{3, "", false}), encode_assignment(3));
  EXPECT_THROW(decode_answer(R"({"node_rank":-1})"), RecordError);
  EXPECT_THROW(decode_answer(R"({"error":""})"), RecordError);
  EXPECT_THROW(decode_answer(R"({"wait":false})"), RecordError);

  RankOutcome root{3,
                   1,
                   1,
                   "b",
                   77,
                   ExitInfo::signaled(SIGSEGV),
                   false,
                   1.5,
                   2.5,
                   {"x", "y"},
                   WorkerError{"E: m", "tb", "1"}};
  JobVerdict v{139, "", root, 1};
  EXPECT_EQ(decode_verdict(encode_verdict(v)), v);
  std::vector<RankOutcome> outcomes = {
      root, RankOutcome{4, 0, 2, "c", 78, std::nullopt, true, 1, 0, {}, {}}};
  EXPECT_EQ(decode_outcomes(encode_outcomes(outcomes)), outcomes);
}

TEST(Records, MalformedRecordsAreErrorsNotCrashes) {
  for (const char* text : {"", "{", "[]", "{\"exit_code\": \"x\"}", "null",
                           "{\"exit_code\":1,\"message\":\"m\",\"node\":0,\"root_cause\":{}}"}) {
    SCOPED_TRACE(text);
    EXPECT_THROW(decode_verdict(text), RecordError);
    EXPECT_THROW(decode_join(text), RecordError);
    EXPECT_THROW(decode_plan(text), RecordError);
  }
}

TEST(Records, InvalidUtf8IsReplacedNotFatal) {
  RankOutcome root{0, 0, 0, "h", 1, ExitInfo::exited(1), false, 0, 0, {"caf\xc3", "\xff\xfe ok"},
                   {}};
  JobVerdict v{1, "", root, 0};
  JobVerdict back = decode_verdict(encode_verdict(v));
  EXPECT_EQ(back.root_cause->last_stderr[1], "\xef\xbf\xbd\xef\xbf\xbd ok");
  JobSummary s;
  s.root_cause = root;
  auto doc = nlohmann::json::parse(encode_summary(s));
  EXPECT_EQ(doc["root_cause"]["last_stderr"].size(), 2u);
}

TEST(Records, SummaryShowsTheTopology) {
  JobSummary s;
  s.topology = uniform_topology(2, 2, 0, "a", "10.0.0.1", "10.0.0.1", 5);
  auto doc = nlohmann::json::parse(encode_summary(s));
  EXPECT_EQ(doc["topology"]["world_size"], 4);
  EXPECT_EQ(doc["topology"]["nodes"][1]["first_rank"], 2);
  EXPECT_EQ(doc["topology"]["nodes"][0]["host"], "a");
}

TEST(Records, PyTorchErrorFilesAreRead) {
  // As torch.distributed.elastic.multiprocessing.errors.record writes it.
  auto e = decode_error_file(
      R"({"message": {"message": "ValueError: nan", "extraInfo": {"py_callstack": )"
      R"("Traceback (most recent call last):\n  x\nValueError: nan\n", "timestamp": "17"}}})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "ValueError: nan");
  EXPECT_EQ(e->traceback, "Traceback (most recent call last):\n  x\nValueError: nan\n");
  EXPECT_EQ(e->timestamp, "17");
  // The newer plain-string form, and what is not an error file at all.
  EXPECT_EQ(decode_error_file(R"({"message": "RuntimeError: x"})")->message, "RuntimeError: x");
  for (const char* bad : {"", "not json", "[1]", "{}", R"({"message": 3})", "{\"message\": {}}"}) {
    EXPECT_FALSE(decode_error_file(bad)) << bad;
  }
}

TEST(Records, HugeErrorFilesAreCutOnCharacterBoundaries) {
  std::string message;
  for (int i = 0; i < 3000; ++i) {
    message += "\xc3\xa9";  // é, two bytes each
  }
  auto e = decode_error_file(nlohmann::json({{"message", {{"message", message}}}}).dump());
  ASSERT_TRUE(e);
  EXPECT_LT(e->message.size(), message.size());
  EXPECT_NO_THROW(
      nlohmann::json(e->message).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict))
      << "still valid UTF-8";
}

TEST(Records, TheRootCausesErrorIsWrittenAsTorchrunWritesIt) {
  auto doc = nlohmann::json::parse(encode_error_file({"ValueError: nan", "tb", "17"}, 3));
  EXPECT_EQ(doc["message"]["message"], "ValueError: nan");
  EXPECT_EQ(doc["message"]["extraInfo"]["py_callstack"], "tb");
  EXPECT_EQ(doc["message"]["extraInfo"]["timestamp"], "17");
  EXPECT_EQ(doc["message"]["errorCode"], 3);
  auto back = decode_error_file(doc.dump());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->message, "ValueError: nan");
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

TEST(Records, WhatEveryNodeReadsDoesNotGrowWithTheJob) {
  // 16,384 nodes x 8: every node reads the plan, so the store host would
  // serve N times its size; it holds the node sizes, run-length.
  Topology t = uniform_topology(16384, 8, 0, "gpu-0001", "10.0.0.1", "10.0.0.1", 29500);
  const std::string text = encode_plan(TopologyRecord{t, ""});
  EXPECT_LT(text.size(), 200u) << text;
  Topology mixed;  // nodes of 8 workers but one of 4: three runs
  for (int n = 0; n < 16384; ++n) {
    mixed.nodes.push_back(NodeEntry{n, "h", "a", n == 100 ? 4 : 8, 0, {}});
  }
  assign_ranks(mixed);
  auto back = decode_plan(encode_plan(TopologyRecord{mixed, ""}));
  EXPECT_EQ(back.topology->sizes, (std::vector<SizeRun>{{8, 100}, {4, 1}, {8, 16283}}));
  EXPECT_EQ(entry_from_sizes(back.topology->sizes, 101).first_rank, 804);
}

TEST(Records, EveryNodeLearnsTheHostNamesWhereTheyFoldIntoAShortList) {
  // The PMIx servers' node map on every node, not only node 0's.
  Topology t;
  for (int n = 0; n < 1024; ++n) {
    const std::string num = std::to_string(n + 1);
    t.nodes.push_back(NodeEntry{n, "gpu" + std::string(4 - num.size(), '0') + num, "a", 8, 0, {}});
  }
  assign_ranks(t);
  const std::string text = encode_plan(TopologyRecord{t, ""});
  EXPECT_LT(text.size(), 200u) << text;
  auto back = decode_plan(text);
  EXPECT_EQ(back.topology->host_list, "gpu[0001-1024]") << "carried, not expanded";
  for (int n = 0; n < 1024; ++n) {  // names that fold into nothing: not carried past 16 KiB
    t.nodes[static_cast<size_t>(n)].host = "host-" + std::to_string(n * 7919 % 1024) + ".example";
  }
  const std::string long_text = encode_plan(TopologyRecord{t, ""});
  EXPECT_LT(long_text.size(), 17u * 1024) << "the plan does not grow with the job";
  EXPECT_TRUE(decode_plan(long_text).topology->host_list.empty());
  for (const char* bad : {R"("hosts":"n[1-3]")", R"("hosts":"n[1-")"}) {
    std::string with = encode_plan(TopologyRecord{uniform_topology(2, 1, 0, "", "", "a", 1), ""});
    const auto at = with.find("\"sizes\"");
    ASSERT_NE(at, std::string::npos) << with;
    with.insert(at, std::string(bad) + ",");
    EXPECT_THROW(decode_plan(with), RecordError) << with;
  }
}

TEST(Records, APlanWhoseSizesDoNotFitTheWorldIsMalformed) {
  for (const char* bad :
       {// a node of 2e9 workers
        R"({"ok":true,"topology":{"world_size":2,"master_addr":"a","master_port":1,)"
        R"("sizes":[[2000000000,1]]}})",
        // sizes that add up to more, or fewer, ranks than the world
        R"({"ok":true,"topology":{"world_size":4,"master_addr":"a","master_port":1,)"
        R"("sizes":[[2,3]]}})",
        R"({"ok":true,"topology":{"world_size":4,"master_addr":"a","master_port":1,)"
        R"("sizes":[[2,1]]}})",
        // counts that overflow when multiplied
        R"({"ok":true,"topology":{"world_size":4,"master_addr":"a","master_port":1,)"
        R"("sizes":[[65536,65536],[65536,65536]]}})",
        R"({"ok":true,"topology":{"world_size":0,"master_addr":"a","master_port":1,)"
        R"("sizes":[]}})",
        R"({"ok":true,"topology":{"world_size":2,"master_addr":"a","master_port":1,)"
        R"("sizes":[[2,0],[1,2]]}})",
        R"({"ok":true,"topology":{"world_size":2,"master_addr":"a","master_port":1,)"
        R"("sizes":[{"nproc":2}]}})",
        // every node listed: one per node, matching the sizes, a port per worker
        R"({"ok":true,"topology":{"world_size":2,"master_addr":"a","master_port":1,)"
        R"("sizes":[[2,1]],"nodes":[[0,"h","a",2,3,[1,2]]]}})",
        R"({"ok":true,"topology":{"world_size":2,"master_addr":"a","master_port":1,)"
        R"("sizes":[[2,1]],"nodes":[[0,"h","a",2,0,[1]]]}})",
        R"({"ok":true,"topology":{"world_size":2,"master_addr":"a","master_port":1,)"
        R"("sizes":[[2,1]],"nodes":[]}})",
        R"({"ok":true,"topology":{"world_size":2,"master_addr":"a","master_port":1,)"
        R"("sizes":[[2,1]],"nodes":[{"node_rank":0}]}})"}) {
    EXPECT_THROW(decode_plan(bad), RecordError) << bad;
  }
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

TEST(Records, NumbersOutOfRangeAreMalformedNotUndefined) {
  // Found by fuzz_records: nlohmann converts 4.3e19 to int with undefined behaviour.
  for (const char* bad :
       {R"({"exit_code":1e30,"message":"","node":0,"lost":-1,"root_cause":null})",
        R"({"exit_code":4294967296,"message":"","node":0,"lost":-1,"root_cause":null})",
        R"({"exit_code":1.5,"message":"","node":0,"lost":-1,"root_cause":null})",
        R"({"exit_code":7,"message":"","node":-99999999999,"lost":-1,"root_cause":null})"}) {
    EXPECT_THROW(decode_verdict(bad), RecordError) << bad;
  }
  EXPECT_EQ(decode_verdict(R"({"exit_code":7,"message":"m","node":-1,"lost":-1,"root_cause":null})")
                .exit_code,
            7);
}

}  // namespace
}  // namespace ddplaunch

namespace ddplaunch {
namespace {

TEST(Records, ASummaryPathsNodeRankFieldIsEachNodesOwn) {
  EXPECT_EQ(summary_path("/shared/s.json", 0), "/shared/s.json");
  EXPECT_EQ(summary_path("/shared/s.json", 1), "/shared/s.json");
  EXPECT_EQ(summary_path("/s/n{node_rank}.json", std::nullopt), "/s/n0.json");
  EXPECT_EQ(summary_path("/s/{node_rank}/n{node_rank}.json", 3), "/s/3/n3.json");
  EXPECT_EQ(summary_path("", 0), std::nullopt);
}

}  // namespace
}  // namespace ddplaunch
