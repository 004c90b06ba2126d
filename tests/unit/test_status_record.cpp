// The status room: the typed record and its one codec (round trips, forged
// answers), the merge of many nodes' answers, the screen and /metrics.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "output/json_writer.hpp"
#include "status/metrics_text.hpp"
#include "status/status_codec.hpp"
#include "status/status_screen.hpp"

namespace ddplaunch {
namespace {

RankStatus a_rank(int rank) {
  RankStatus r;
  r.rank = rank;
  r.local_rank = rank % 2;
  r.pid = 1000 + rank;
  r.state = "running";
  r.run_s = 3.0;
  r.progress_events = 7;
  r.since_progress_s = 2.5;
  r.last_line = "epoch 3 loss 0.25";
  r.cpu_s = 1.5;
  r.cpu_percent = 50.0;
  r.rss_kib = 2048;
  r.processes = 2;
  return r;
}

NodeStatus a_node(int node_rank, std::vector<int> ranks) {
  NodeStatus n;
  n.node_rank = node_rank;
  n.host = "h" + std::to_string(node_rank);
  n.addr = "10.0.0." + std::to_string(node_rank + 1);
  n.state = "running";
  n.agent_pid = 500 + node_rank;
  n.agent_cpu_s = 0.25;
  n.agent_rss_kib = 6000;
  n.round = 1;
  n.round_start_time = 1700000000.5;
  n.local_ranks = static_cast<int>(ranks.size());
  for (int r : ranks) {
    n.ranks.push_back(a_rank(r));
  }
  return n;
}

JobStatus a_job(int nnodes) {
  JobStatus j;
  j.run_id = "j1";
  j.round = 1;
  j.restarts = 1;
  j.max_restarts = 3;
  j.nnodes = nnodes;
  j.nnodes_expected = std::to_string(nnodes);
  j.world_size = 2 * nnodes;
  j.start_time = 1700000000;
  j.elapsed_s = 12.5;
  return j;
}

TEST(StatusCodec, ANodesAnswerRoundTripsEveryField) {
  NodeStatus n = a_node(0, {0, 1});
  n.job = a_job(2);
  n.job->lost_nodes.push_back({3, "h3", "10.0.0.4", 0, 1700000001.25});
  n.ranks[1].state = "failed";
  n.ranks[1].since_progress_s.reset();
  n.ranks[1].exit = "exited with code 3";
  n.ranks[0].gpu_memory_bytes = 3ULL << 30;
  const auto back = decode_node_status(encode_node_status(n));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, n);
}

TEST(StatusCodec, TheDocumentAndTheRequestRoundTrip) {
  StatusDocument doc =
      merge_status(4, {0, 1, 2}, {a_node(0, {0}), std::nullopt, a_node(2, {4})}, std::nullopt);
  doc.job = a_job(3);
  const auto back = decode_status_document(encode_status_document(doc));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, doc);
  StatusRequest request;
  request.ranks = std::set<int>{0, 1, 2, 3, 8};
  request.timeout_s = 5;
  EXPECT_EQ(nlohmann::json::parse(encode_status_request(request))["ranks"], "0-3,8");
  EXPECT_EQ(decode_status_request(encode_status_request(request)), request);
  EXPECT_EQ(decode_status_request("{}"), StatusRequest());
  EXPECT_FALSE(decode_status_request(R"({"ranks":"x"})")) << "a filter that is no rank list";
  EXPECT_FALSE(decode_status_request("[1]"));
}

// A rank's last line is whatever the worker wrote: invalid UTF-8 still
// makes valid JSON.
TEST(StatusCodec, AnyBytesInALastLineStillEncode) {
  NodeStatus n = a_node(1, {2});
  n.ranks[0].last_line = "bad \xff\xfe bytes \x01";
  const std::string text = encode_node_status(n);
  EXPECT_TRUE(nlohmann::json::accept(text)) << text;
  const auto back = decode_node_status(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->ranks.at(0).last_line.substr(0, 4), "bad ");
}

// The writer's strings are nlohmann's with error_handler_t::replace, byte
// for byte, whatever bytes they hold: control characters escaped, invalid
// UTF-8 (truncated, overlong, surrogates, past U+10FFFF) one U+FFFD per
// broken sequence.
TEST(JsonWriter, StringsAreNlohmannsReplacedTextByteForByte) {
  const auto nlohmanns = [](const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  const auto ours = [](const std::string& s) {
    std::string out;
    JsonWriter(out).value(s);
    return out;
  };
  for (const std::string& s :
       {std::string(), std::string("plain"), std::string("q\"b\\s/\b\f\n\r\t\x01\x1f\x7f"),
        std::string("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string("\xc0\xaf \xe0\x80\x80"),
        std::string("\xed\xa0\x80 \xf4\x90\x80\x80 \xf5"), std::string("cut \xe2\x82"),
        std::string("\xe2\x82 mid"), std::string("\x80\xbf\xfe\xff"), std::string(1, '\0')}) {
    EXPECT_EQ(ours(s), nlohmanns(s)) << nlohmanns(s);
  }
  std::mt19937 random(7);
  for (int i = 0; i < 20000; ++i) {
    std::string s(random() % 12, '\0');
    for (char& c : s) {
      // Mostly the bytes UTF-8 is made of, so that sequences form and break.
      const unsigned pick = random() % 8;
      c = static_cast<char>(pick < 3   ? 0x80 + random() % 64
                            : pick < 5 ? 0xc0 + random() % 64
                            : pick < 6 ? random() % 32
                                       : random() % 256);
    }
    ASSERT_EQ(ours(s), nlohmanns(s)) << nlohmanns(s);
  }
}

TEST(JsonWriter, NumbersReadBackAsTheyWereAndTheShapeIsJson) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.field("i", -3);
  w.field("big", 18446744073709551615ULL);
  w.field("ll", -9223372036854775807LL);
  w.key("doubles");
  w.begin_array();
  for (const double d : {0.0, -0.0, 3.0, 0.1, 1e-7, 123456789.125, 1e300, 2.5e16}) {
    w.value(d);
  }
  w.value(std::numeric_limits<double>::infinity());
  w.end_array();
  w.field("none", std::optional<double>());
  w.field("yes", true);
  w.key("empty");
  w.begin_object();
  w.end_object();
  w.end_object();
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["i"], -3);
  EXPECT_EQ(j["big"].get<unsigned long long>(), 18446744073709551615ULL);
  EXPECT_EQ(j["ll"].get<long long>(), -9223372036854775807LL);
  const std::vector<double> back(j["doubles"].begin(), j["doubles"].end() - 1);
  EXPECT_EQ(back, (std::vector<double>{0.0, -0.0, 3.0, 0.1, 1e-7, 123456789.125, 1e300, 2.5e16}))
      << out;
  EXPECT_TRUE(j["doubles"][2].is_number_float()) << "3.0 stays a float for the reader: " << out;
  EXPECT_TRUE(j["doubles"][8].is_null()) << "infinity is null, as nlohmann writes it";
  EXPECT_TRUE(j["none"].is_null());
  EXPECT_EQ(j["yes"], true);
  EXPECT_EQ(j["empty"], nlohmann::json::object());
}

// The codec reads what it wrote, for records of every shape and any bytes
// in their strings, and its text is the JSON nlohmann reads: every field
// under the name docs/STATUS.md gives it.
TEST(StatusCodec, ManyRecordsOfEveryShapeRoundTrip) {
  std::mt19937 random(11);
  const auto text = [&] {
    std::string s(random() % 20, '\0');
    for (char& c : s) {
      c = static_cast<char>(random() % 256);
    }
    return s;
  };
  for (int i = 0; i < 200; ++i) {
    NodeStatus n = a_node(static_cast<int>(random() % 100), {});
    n.host = text();
    if (random() % 3 == 0) {
      n.agent_pid.reset();
      n.agent_cpu_s = 0;
      n.agent_rss_kib = 0;
      n.round_start_time = 0;
      n.local_ranks = 0;
    }
    if (random() % 2) {
      n.job = a_job(static_cast<int>(random() % 50));
      n.job->run_id = text();
      n.job->elapsed_s = static_cast<double>(random()) / 7.0;
      for (auto k = static_cast<unsigned>(random() % 3); k > 0; --k) {
        n.job->lost_nodes.push_back({static_cast<int>(k), text(), text(), 2, 1.0 / k});
      }
    }
    for (auto k = static_cast<unsigned>(random() % 4); k > 0; --k) {
      RankStatus r = a_rank(static_cast<int>(random()));
      r.last_line = text();
      r.run_s = static_cast<double>(random()) / 3.0;
      if (random() % 2) {
        r.since_progress_s.reset();
        r.exit = text();
      }
      if (random() % 2) {
        r.gpu_memory_bytes = (1ULL << 63) + random();
      }
      n.ranks.push_back(r);
    }
    const std::string encoded = encode_node_status(n);
    const auto j = nlohmann::json::parse(encoded);
    EXPECT_EQ(j.contains("agent_pid"), n.agent_pid.has_value());
    EXPECT_EQ(j.contains("job"), n.job.has_value());
    EXPECT_EQ(j["ranks"].size(), n.ranks.size());
    auto back = decode_node_status(encoded);
    ASSERT_TRUE(back) << encoded;
    // Strings come back as valid UTF-8: compare with what nlohmann makes of them.
    EXPECT_EQ(encode_node_status(*back), encoded);
    if (nlohmann::json(n.host).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) ==
        nlohmann::json(n.host).dump(-1, ' ', false, nlohmann::json::error_handler_t::ignore)) {
      EXPECT_EQ(back->host, n.host);
    }
  }
  StatusDocument doc =
      merge_status(9, {0, 1, 2, 3}, {a_node(0, {0, 1}), std::nullopt, a_node(2, {4}), std::nullopt},
                   std::nullopt);
  doc.job = a_job(4);
  const std::string encoded = encode_status_document(doc);
  const auto j = nlohmann::json::parse(encoded);
  EXPECT_EQ(j["missing"], nlohmann::json::parse("[1,3]"));
  EXPECT_EQ(j["ranks"][2]["node_rank"], 2);
  EXPECT_FALSE(j["nodes"][0].contains("ranks")) << "a document's nodes hand their ranks over";
  EXPECT_EQ(decode_status_document(encoded), doc);
  // A big job's document comes in pieces that make the same text.
  for (int r = 0; r < 20000; ++r) {
    doc.ranks.push_back(a_rank(r));
  }
  std::string pieces;
  int count = 0;
  encode_status_document(doc, [&](std::string_view piece) {
    pieces += piece;
    ++count;
  });
  EXPECT_GT(count, 2);
  EXPECT_EQ(pieces, encode_status_document(doc));
  EXPECT_EQ(decode_status_document(pieces), doc);
}

// A forged answer of any shape reads as nothing or as what it says, never
// as a crash: members nobody knows are skipped however deep, and a value
// of the wrong type anywhere leaves the whole answer out.
TEST(StatusCodec, UnknownMembersAreSkippedAndWrongTypesRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto n = decode_node_status(R"({"extra":{"a":[1,{"b":[]}],"c":"d"},"node_rank":3,"more":)" +
                                    deep + R"(,"ranks":[{"rank":5,"future":[[{}]]}]})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->node_rank, 3);
  ASSERT_EQ(n->ranks.size(), 1u);
  EXPECT_EQ(n->ranks[0].rank, 5);
  for (const char* forged :
       {R"({"node_rank":1.5})", R"({"node_rank":4294967296})", R"({"ranks":[{"pid":true}]})",
        R"({"ranks":[{"rank":1,"exit":3}]})", R"({"ranks":{"rank":1}})", R"({"ranks":[[1]]})",
        R"({"job":[1]})", R"({"ranks":[null]})", R"({"host":"a"} x)", R"("node")", "[]", "",
        R"({"ranks":[{"gpu_memory_bytes":-1}]})", R"({"host":"a")"}) {
    EXPECT_FALSE(decode_node_status(forged)) << forged;
  }
  EXPECT_FALSE(decode_status_document(R"({"missing":["a"]})"));
  EXPECT_EQ(decode_node_status(R"({"agent_pid":null,"host":null})"), NodeStatus());
}

TEST(StatusMerge, TheDocumentListsWhoAnsweredWhoDidNotAndTheJobFromNodeZero) {
  NodeStatus zero = a_node(0, {0});
  zero.job = a_job(3);
  const StatusDocument doc = merge_status(7, {0, 1, 2},
                                          decode_answers({encode_node_status(zero), std::nullopt,
                                                          encode_node_status(a_node(2, {4, 5}))}),
                                          std::set<int>{2});
  EXPECT_EQ(doc.request, 7);
  ASSERT_TRUE(doc.job);
  EXPECT_EQ(doc.job->nnodes, 3);
  EXPECT_EQ(doc.missing, std::vector<int>{1});
  ASSERT_EQ(doc.nodes.size(), 1u) << "node 0 answered for the job's size only";
  EXPECT_EQ(doc.nodes[0].node_rank, 2);
  EXPECT_TRUE(doc.nodes[0].ranks.empty()) << "its ranks are the document's";
  ASSERT_EQ(doc.ranks.size(), 2u);
  EXPECT_EQ(doc.ranks[1].rank, 5);
  EXPECT_EQ(doc.ranks[1].node_rank, 2);
}

TEST(StatusMerge, ANodeTheJobLostIsShownLostInItsRound) {
  NodeStatus zero = a_node(0, {0});
  zero.job = a_job(2);
  zero.job->lost_nodes.push_back({1, "h1", "10.0.0.2", 0, 1.0});
  const StatusDocument doc = merge_status(1, {0}, {zero}, std::nullopt);
  ASSERT_EQ(doc.nodes.size(), 2u);
  EXPECT_EQ(doc.nodes[1].state, "lost");
  EXPECT_FALSE(doc.nodes[1].agent_pid);
  const std::string screen = format_status(doc, 120);
  EXPECT_NE(screen.find("lost"), std::string::npos) << screen;
  EXPECT_NE(screen.find("in round 0"), std::string::npos) << screen;
}

// The workers' credential may write status/ keys: an answer of any other
// shape is left out (the node counts as not answering), never trusted, and
// never breaks the document or the screen.
TEST(StatusMerge, ForgedAnswersAreLeftOutNotTrusted) {
  const StatusDocument doc =
      merge_status(3, {0, 1, 2, 3, 4},
                   decode_answers({R"({"job":5,"ranks":[]})", R"([1,2])",
                                   R"({"ranks":[7,{"rank":"a","pid":[]}]})", "\xff\xfe",
                                   R"({"node_rank":4,"host":7})"}),
                   std::nullopt);
  EXPECT_FALSE(doc.job);
  EXPECT_EQ(doc.missing, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(doc.ranks.empty());
  const std::string screen = format_status(doc, 80);
  EXPECT_NE(screen.find("job: node 0 did not answer"), std::string::npos) << screen;
  // A huge lost-node list is read no further than 1,024 entries.
  nlohmann::json big = {{"job", {{"lost_nodes", nlohmann::json::array()}}}, {"ranks", {}}};
  for (int i = 0; i < 5000; ++i) {
    big["job"]["lost_nodes"].push_back({{"node_rank", i}});
  }
  const auto node = decode_node_status(big.dump());
  ASSERT_TRUE(node);
  EXPECT_EQ(node->job->lost_nodes.size(), 1024u);
  EXPECT_EQ(answered_nnodes(R"({"job":{"nnodes":12}})"), 12);
  EXPECT_EQ(answered_nnodes(R"({"job":{"nnodes":"12"}})"), std::nullopt);
}

TEST(StatusScreen, TheScreenHasTheJobEveryNodeAndRankAndNamesTheSilentNodes) {
  StatusDocument doc;
  doc.job = a_job(3);
  doc.nodes.push_back(a_node(0, {}));
  doc.missing = {2};
  RankStatus r = a_rank(0);
  r.node_rank = 0;
  r.state = "stopped";
  r.last_line = "epoch 3 loss 0.25 " + std::string(300, 'x');
  doc.ranks.push_back(r);
  const std::string screen = format_status(doc, 100);
  EXPECT_NE(screen.find("job j1  round 1  restarts 1/3  nodes 3 (expected 3)  world size 6"),
            std::string::npos)
      << screen;
  EXPECT_NE(screen.find("2 did not answer in time"), std::string::npos) << screen;
  EXPECT_NE(screen.find("stopped"), std::string::npos) << screen;
  EXPECT_NE(screen.find("epoch 3 loss 0.25"), std::string::npos) << screen;
  for (size_t at = 0, end; at < screen.size(); at = end + 1) {
    end = screen.find('\n', at);
    EXPECT_LE(end - at, 100u) << "cut to the width";
  }
}

// Where NVML gave each rank's GPU memory: a GPU column on the screen and a
// metric; where it did not, neither.
TEST(StatusScreen, GpuMemoryIsShownWhereNvmlGaveIt) {
  StatusDocument doc;
  RankStatus r = a_rank(0);
  r.node_rank = 0;
  r.last_line = "step";
  doc.ranks.push_back(r);
  EXPECT_EQ(format_status(doc, 200).find(" GPU "), std::string::npos);
  doc.ranks[0].gpu_memory_bytes = 3ULL << 30;
  const std::string screen = format_status(doc, 200);
  EXPECT_NE(screen.find("    GPU  LAST LINE"), std::string::npos) << screen;
  EXPECT_NE(screen.find("  3072M  step"), std::string::npos) << screen;
  NodeStatus node = a_node(0, {0});
  node.host = "h";
  EXPECT_EQ(openmetrics_text(node).find("ddplaunch_rank_gpu_memory_bytes{"), std::string::npos);
  node.ranks[0].gpu_memory_bytes = 1024;
  EXPECT_NE(openmetrics_text(node).find("ddplaunch_rank_gpu_memory_bytes{node_rank=\"0\","
                                        "host=\"h\",rank=\"0\",local_rank=\"0\"} 1024\n"),
            std::string::npos)
      << openmetrics_text(node);
}

TEST(MetricsText, ANodesRecordIsOpenMetricsWithEscapedLabelsAndAnEnd) {
  NodeStatus node = a_node(0, {3});
  node.host = "a\"b";
  node.job = a_job(4);
  node.ranks[0].local_rank = 0;
  node.ranks[0].state = "stopped";
  node.ranks[0].progress_events = 42;
  node.ranks[0].rss_kib = 10;
  const std::string text = openmetrics_text(node);
  EXPECT_NE(text.find("# TYPE ddplaunch_rank_progress_events counter\n"), std::string::npos);
  EXPECT_NE(text.find("ddplaunch_rank_progress_events_total{node_rank=\"0\",host=\"a\\\"b\","
                      "rank=\"3\",local_rank=\"0\"} 42\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("state=\"stopped\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("} 10240\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ddplaunch_job_restarts_total{node_rank=\"0\",host=\"a\\\"b\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# UNIT ddplaunch_rank_progress_age_seconds seconds\n"), std::string::npos);
  EXPECT_TRUE(text.ends_with("# EOF\n"));
  // An ended rank has no progress age.
  node.ranks[0].since_progress_s.reset();
  EXPECT_EQ(openmetrics_text(node).find("ddplaunch_rank_progress_age_seconds{"), std::string::npos);
}

}  // namespace
}  // namespace ddplaunch
