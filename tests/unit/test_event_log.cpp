// EventLog (--event-log): one JSON object a line with the common fields
// first; lines held until the node knows its rank where the path names it;
// "-" through the console; text escaped; a path that cannot be written a
// usage error at once, or a warning when only the rank's path fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "config/launch_error.hpp"
#include "output/event_log.hpp"
#include "output/router.hpp"
#include "scratch_dir.hpp"

namespace ddplaunch {
namespace {

struct Recording : ConsoleSink {
  std::vector<std::pair<int, std::string>> writes;
  bool write(int fd, std::string_view data) override {
    writes.emplace_back(fd, std::string(data));
    return true;
  }
};

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

TEST(EventLog, EachEventIsOneLineWithTheCommonFieldsThenItsOwn) {
  ScratchDir dir;
  Recording console;
  const std::string path = dir / "events.jsonl";
  {
    EventLog log(path, console, "gpu-7");
    log.set_node_rank(3);
    log.emit(1795913834.1234, "rank_exit",
             EventFields()
                 .num("rank", 12)
                 .text("signal", "SIGKILL")
                 .null("root_rank")
                 .flag("ok", false)
                 .real("seconds", 0.5)
                 .num_or_null("pid", std::nullopt)
                 .text_or_null("message", std::string("a \"quoted\"\nline\xff")));
  }
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  EXPECT_EQ(text.rfind("{\"time\":1795913834.123,\"event\":\"rank_exit\",\"node\":3,", 0), 0u)
      << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1u);
  const auto& e = lines[0];
  EXPECT_EQ(e["host"], "gpu-7");
  EXPECT_EQ(e["rank"], 12);
  EXPECT_EQ(e["signal"], "SIGKILL");
  EXPECT_TRUE(e["root_rank"].is_null());
  EXPECT_EQ(e["ok"], false);
  EXPECT_DOUBLE_EQ(e["seconds"].get<double>(), 0.5);
  EXPECT_TRUE(e["pid"].is_null());
  EXPECT_EQ(e["message"], "a \"quoted\"\nline\xef\xbf\xbd");  // invalid UTF-8 replaced
  EXPECT_TRUE(console.writes.empty());
}

TEST(EventLog, LinesWaitForTheNodeRankThePathNamesThenGoToThatNodesFile) {
  ScratchDir dir;
  Recording console;
  const std::string pattern = dir / "events-{node_rank}.jsonl";
  EventLog log(pattern, console, "h");
  log.emit(1.0, "agent_start");
  log.emit(2.0, "rendezvous_start", EventFields().num("round", 0));
  EXPECT_FALSE(std::filesystem::exists(dir / "events-0.jsonl"));
  log.set_node_rank(2);
  log.emit(3.0, "rendezvous_end");
  const auto lines = read_lines(dir / "events-2.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["event"], "agent_start");
  EXPECT_TRUE(lines[0]["node"].is_null()) << "written before the rank was known";
  EXPECT_EQ(lines[2]["node"], 2);
  EXPECT_EQ(event_log_path(pattern, 5), dir / "events-5.jsonl");
}

TEST(EventLog, ANodeThatNeverLearnsItsRankWritesWhereNodeZerosWouldAtTheEnd) {
  ScratchDir dir;
  Recording console;
  {
    EventLog log(dir / "e{node_rank}.jsonl", console, "h");
    log.emit(1.0, "agent_start");
    log.emit(2.0, "job_end", EventFields().num("exit_code", 3));
  }
  const auto lines = read_lines(dir / "e0.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["exit_code"], 3);
}

TEST(EventLog, ADashWritesEachLineToStderrThroughTheConsole) {
  Recording console;
  EventLog log("-", console, "h");
  log.emit(1.0, "agent_start");
  log.set_node_rank(0);
  log.emit(2.0, "job_end");
  ASSERT_EQ(console.writes.size(), 2u);
  EXPECT_EQ(console.writes[0].first, 2);
  EXPECT_EQ(nlohmann::json::parse(console.writes[1].second)["node"], 0);
  EXPECT_EQ(console.writes[1].second.back(), '\n');
}

TEST(EventLog, AFileThatCannotBeWrittenIsAUsageErrorNamingTheOption) {
  ScratchDir dir;
  Recording console;
  try {
    EventLog log(dir / "missing/events.jsonl", console, "h");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--event-log ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("check the directory exists"), std::string::npos);
  }
  // Where only the rank's file fails, the job goes on without its events.
  EventLog later(dir / "missing/e{node_rank}.jsonl", console, "h");
  later.emit(1.0, "agent_start");
  EXPECT_NO_THROW(later.set_node_rank(1));
  EXPECT_NO_THROW(later.emit(2.0, "job_end"));
}

}  // namespace
}  // namespace ddplaunch
