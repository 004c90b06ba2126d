// HostsLauncher, the launching command's state machine, with fake children
// (pipes the test holds the other ends of; their exits queued by hand), a
// fake clock and a console that records what it is given. The loop is real:
// each poll() hands what is ready to the launcher, as run_hosts_launcher()
// does. No process, no thread, no sleep.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "config/launch_error.hpp"
#include "fake_store.hpp"
#include "launcher/channel.hpp"
#include "launcher/hosts_launcher.hpp"
#include "log.hpp"

namespace ddplaunch {
namespace {

using namespace std::chrono_literals;
using testing_store::FakeClock;

// One started process, as the test sees it.
struct FakeChild {
  pid_t pid = -1;
  std::vector<std::string> argv;
  posix::Fd channel;  // what the launcher writes to its stdin
  posix::Fd out, err;
};

class FakeStarter : public ChildStarter {
 public:
  std::deque<FakeChild> children;
  std::deque<std::pair<pid_t, ExitInfo>> exits;
  std::set<std::string> missing;  // programs that cannot be executed

  Child start(const ChildStart& spec) override {
    if (missing.contains(spec.argv.front())) {
      throw LaunchError(k_exit_cannot_execute,
                        "cannot execute '" + spec.argv.front() + "': No such file or directory");
    }
    auto in = posix::make_pipe();
    auto out = posix::make_pipe();
    auto err = posix::make_pipe();
    for (int fd : {in.write.get(), out.read.get(), err.read.get(), in.read.get()}) {
      posix::set_nonblocking(fd);
    }
    // Above any pid_max: a Child dropped unreaped signals no real process.
    const pid_t pid = (1 << 30) + static_cast<pid_t>(children.size());
    children.push_back(
        {pid, spec.argv, std::move(in.read), std::move(out.write), std::move(err.write)});
    Child child(pid, std::move(out.read), std::move(err.read));
    child.in() = std::move(in.write);
    return child;
  }
  std::optional<std::pair<pid_t, ExitInfo>> reap() override {
    if (exits.empty()) {
      return std::nullopt;
    }
    auto e = exits.front();
    exits.pop_front();
    return e;
  }
};

struct RecordingConsole : ConsoleSink {
  std::string out, err;
  bool behind = false;
  bool write(int fd, std::string_view data) override {
    (fd == 1 ? out : err) += data;
    return true;
  }
  bool backlogged(int) override { return behind; }
};

struct Log : log::LineOutput {
  std::vector<std::string> lines;
  void write_line(std::string_view line) override { lines.emplace_back(line); }
  bool has(std::string_view part) const {
    for (const auto& l : lines) {
      if (l.find(part) != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  std::string all() const {
    std::string text;
    for (const auto& l : lines) {
      text += l;
    }
    return text;
  }
};

ExitInfo code(int c) {
  return ExitInfo::exited(c);
}

struct Launch {
  posix::EventLoop loop;
  FakeStarter starter;
  FakeClock clock;
  RecordingConsole console;
  Log log;
  std::optional<AgentChannel> upstream;
  std::optional<HostsLauncher> launcher;
  ChannelHeader header{"t0k3n", {{"A", "1"}}, 0};

  Launch() {
    ::signal(SIGPIPE, SIG_IGN);  // as run_hosts_launch() has it
    log::setup("info");
    log::set_output(&log);
  }
  ~Launch() {
    launcher.reset();
    log::set_output(nullptr);
  }

  void make(HostsLauncher::Options options = {}) {
    launcher.emplace(loop, starter, clock, console, upstream ? &*upstream : nullptr, options);
  }
  // `n` agents over ssh, node i on host hi; `connections`: each is one of
  // the --fanout connections.
  static HostsPlan plan(int n, bool connections = false) {
    HostsPlan p;
    p.nnodes = n;
    for (int i = 0; i < n; ++i) {
      AgentStart s;
      s.node_rank = i;
      s.host = "h" + std::to_string(i);
      s.connection = connections;
      s.argv = {"ssh", s.host, "ddplaunch"};
      p.starts.push_back(s);
    }
    return p;
  }
  void start(const HostsPlan& p, std::chrono::milliseconds cost = {}) {
    if (!launcher) {
      make();
    }
    launcher->start_all(p, encode_channel_header(header), cost);
    poll();
  }
  // Hands what is ready to the launcher until nothing is.
  void poll() {
    for (int round = 0; round < 100; ++round) {
      const auto ready = loop.wait(std::chrono::steady_clock::now());
      if (ready.empty()) {
        return;
      }
      for (const auto& r : ready) {
        ASSERT_TRUE(launcher->owns(r.tag));
        launcher->on_ready(r);
      }
    }
  }
  void later(std::chrono::milliseconds by) {
    clock.t += by;
    launcher->on_time();
    poll();
  }
  FakeChild& child(size_t i) { return starter.children.at(i); }
  void say(size_t i, std::string_view text, bool to_err = false) {
    const int fd = to_err ? child(i).err.get() : child(i).out.get();
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    poll();
  }
  void ready(size_t i) { say(i, std::string(k_agent_ready) + std::to_string(i) + "\n"); }
  // Child i ends: its pipes close, then its exit is reaped.
  void end(size_t i, ExitInfo how) {
    child(i).out.close();
    child(i).err.close();
    starter.exits.emplace_back(child(i).pid, how);
    launcher->on_signal(SIGCHLD);
    poll();
  }
  // What child i's stdin has received since the last call; "<EOF>" appended at its end.
  std::string channel(size_t i) {
    std::string got;
    char buf[4096];
    while (true) {
      const ssize_t n = ::read(child(i).channel.get(), buf, sizeof buf);
      if (n > 0) {
        got.append(buf, static_cast<size_t>(n));
      } else {
        if (n == 0) {
          got += "<EOF>";
        }
        return got;
      }
    }
  }
};

std::string header_bytes(const ChannelHeader& h) {
  return encode_channel_header(h);
}

TEST(HostsLauncher, EveryAgentStartsAtOnceWithTheHeaderOnItsChannel) {
  Launch l;
  l.start(Launch::plan(3));
  ASSERT_EQ(l.starter.children.size(), 3U);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(l.child(i).argv,
              (std::vector<std::string>{"ssh", "h" + std::to_string(i), "ddplaunch"}));
    EXPECT_EQ(l.channel(i), header_bytes(l.header));
  }
  EXPECT_FALSE(l.launcher->done());
}

TEST(HostsLauncher, ConnectionsBeginOnePerConnectCost) {
  Launch l;
  l.start(Launch::plan(3, true), 100ms);
  EXPECT_EQ(l.starter.children.size(), 0U);
  EXPECT_EQ(l.launcher->next_deadline(), l.clock.t + 100ms);
  l.later(100ms);
  EXPECT_EQ(l.starter.children.size(), 1U);
  l.later(99ms);
  EXPECT_EQ(l.starter.children.size(), 1U);
  l.later(1ms);
  EXPECT_EQ(l.starter.children.size(), 2U);
}

TEST(HostsLauncher, ReadyLinesAreCountedNotShownAndOtherLinesAreShown) {
  Launch l;
  l.start(Launch::plan(2));
  l.say(0, std::string(k_agent_ready) + "0\nhello from node 0\n");
  l.say(1, "partial ");
  l.say(1, "line\n");
  l.say(1, "oops\n", true);
  EXPECT_EQ(l.console.out, "hello from node 0\npartial line\n");
  EXPECT_EQ(l.console.err, "oops\n");
}

TEST(HostsLauncher, ProgressIsToldAfterTwoSecondsNamingThreeWaitingHostsThenEveryFive) {
  Launch l;
  l.start(Launch::plan(6));
  l.ready(0);
  EXPECT_EQ(l.launcher->next_deadline(), l.clock.t + HostsLauncher::k_progress_after);
  l.later(1999ms);
  EXPECT_FALSE(l.log.has("connected"));
  l.later(1ms);
  EXPECT_TRUE(l.log.has("ssh: 1/6 connected, waiting for h1, h2, h3 and 2 more")) << l.log.all();
  l.ready(1);
  l.ready(2);
  l.later(5s);
  EXPECT_TRUE(l.log.has("ssh: 3/6 connected, waiting for h3, h4, h5\n")) << l.log.all();
  l.ready(3);
  l.ready(4);
  l.ready(5);
  EXPECT_TRUE(l.log.has("info: all 6 nodes started, after 7000 ms")) << l.log.all();
  EXPECT_FALSE(l.launcher->next_deadline());
}

TEST(HostsLauncher, AQuickStartSaysNothingAtInfo) {
  Launch l;
  l.start(Launch::plan(2));
  l.ready(0);
  l.ready(1);
  EXPECT_TRUE(l.log.lines.empty()) << l.log.all();
  EXPECT_FALSE(l.launcher->next_deadline());
}

TEST(HostsLauncher, AHostSshCannotReachStopsTheJobWithSshsOwnWords) {
  Launch l;
  l.start(Launch::plan(3));
  l.ready(0);
  l.ready(2);
  l.channel(0);
  l.channel(2);
  l.say(1, "ssh: connect to host h1 port 22: Connection refused\r\n", true);
  l.end(1, code(255));
  EXPECT_TRUE(
      l.log.has("error: node 1 (h1, over ssh) could not be started: ssh could not reach h1: ssh: "
                "connect to host h1 port 22: Connection refused; stopping the job on every node"))
      << l.log.all();
  EXPECT_EQ(l.channel(0), std::string(1, k_channel_stop));
  EXPECT_EQ(l.channel(2), std::string(1, k_channel_stop));
  l.end(0, code(143));
  l.end(2, code(143));
  ASSERT_TRUE(l.launcher->done());
  EXPECT_EQ(l.launcher->exit_code(), k_exit_rendezvous);
}

TEST(HostsLauncher, NodesThatStartedAndWereStoppedForAHostThatCouldNotAreNotBlamedEither) {
  Launch l;
  l.start(Launch::plan(3));
  l.ready(0);
  l.ready(2);
  l.end(1, code(255));                        // never started: the job is stopped on every node
  l.end(0, code(143));                        // stopped as told, while node 2 is slower
  EXPECT_FALSE(l.launcher->next_deadline());  // no grace stop: the job is stopping already
  l.later(HostsLauncher::k_stop_grace * 2);
  l.say(2, "Connection to node2 closed by remote host.\r\n", true);
  l.end(2, code(255));
  EXPECT_TRUE(l.log.has("node 1 (h1, over ssh) could not be started")) << l.log.all();
  EXPECT_FALSE(l.log.has("143")) << l.log.all();
  EXPECT_FALSE(l.log.has("still run")) << l.log.all();
  EXPECT_FALSE(l.log.has("dropped")) << l.log.all();
  EXPECT_EQ(l.launcher->exit_code(), k_exit_rendezvous);
}

TEST(HostsLauncher, EveryHostSshCannotReachIsNamed) {
  Launch l;
  l.start(Launch::plan(3));
  l.end(1, code(255));
  l.end(2, code(255));
  EXPECT_TRUE(l.log.has("node 1 (h1, over ssh) could not be started")) << l.log.all();
  EXPECT_TRUE(l.log.has("node 2 (h2, over ssh) could not be started")) << l.log.all();
}

TEST(HostsLauncher, AHostWithoutDdplaunchSaysToGiveItsPath) {
  Launch l;
  l.start(Launch::plan(2));
  l.say(1, "bash: line 1: ddplaunch: command not found\n", true);
  l.end(1, code(127));
  EXPECT_TRUE(
      l.log.has("ddplaunch is not found on h1 (give --remote-ddplaunch PATH): bash: line 1: "
                "ddplaunch: command not found"))
      << l.log.all();
}

TEST(HostsLauncher, AnElasticJobGoesOnWithoutAHostThatCannotStart) {
  Launch l;
  l.make({.elastic = true, .max_nodes = 3, .via = "ssh"});
  l.start(Launch::plan(3));
  l.ready(0);
  l.ready(1);
  l.channel(0);
  l.end(2, code(255));
  EXPECT_TRUE(
      l.log.has("warning: node 2 (h2, over ssh) could not be started: ssh could not reach "
                "h2; the job goes on without it"))
      << l.log.all();
  EXPECT_EQ(l.channel(0), "");  // no stop
  l.end(0, code(0));
  l.end(1, code(0));
  EXPECT_TRUE(l.launcher->done());
  EXPECT_EQ(l.launcher->exit_code(), k_exit_node_lost);  // a node was lost, the job went on
}

TEST(HostsLauncher, ADroppedSshConnectionIsToldWithSshsLineAndIsANodeLost) {
  Launch l;
  l.start(Launch::plan(2));
  l.ready(0);
  l.ready(1);
  l.say(1, "worker line\nConnection to h1 closed by remote host.\r\n", true);
  l.end(1, code(255));
  EXPECT_TRUE(
      l.log.has("the ssh connection to node 1 (h1, over ssh) dropped (Connection to h1 "
                "closed by remote host.): the agents there stop their workers"))
      << l.log.all();
  l.end(0, code(0));
  EXPECT_EQ(l.launcher->exit_code(), k_exit_node_lost);
}

TEST(HostsLauncher, CtrlCReachesEveryAgentAndEndsWith130) {
  Launch l;
  l.start(Launch::plan(2));
  l.ready(0);
  l.ready(1);
  l.channel(0);
  l.channel(1);
  l.launcher->on_signal(SIGINT);
  EXPECT_EQ(l.channel(0), std::string(1, static_cast<char>(SIGINT)));
  EXPECT_EQ(l.channel(1), std::string(1, static_cast<char>(SIGINT)));
  l.end(0, code(0));
  l.end(1, code(0));
  EXPECT_EQ(l.launcher->exit_code(), 128 + SIGINT);
}

TEST(HostsLauncher, AgentsStoppedWhileConnectingWereNotUnableToStart) {
  Launch l;
  l.start(Launch::plan(2));
  l.ready(0);
  l.launcher->on_signal(SIGINT);  // Ctrl-C while node 1 connects
  l.end(1, code(130));
  l.end(0, code(130));
  EXPECT_FALSE(l.log.has("could not be started")) << l.log.all();
  EXPECT_EQ(l.launcher->exit_code(), 130);
}

TEST(HostsLauncher, NodesStoppedForAnotherThatCouldNotStartAreNotBlamedToo) {
  Launch l;
  l.start(Launch::plan(3));
  l.end(1, code(255));
  l.end(0, code(143));
  l.end(2, code(143));
  EXPECT_TRUE(l.log.has("node 1 (h1, over ssh) could not be started")) << l.log.all();
  EXPECT_FALSE(l.log.has("node 0")) << l.log.all();
  EXPECT_FALSE(l.log.has("node 2")) << l.log.all();
  EXPECT_EQ(l.launcher->exit_code(), k_exit_rendezvous);
}

TEST(HostsLauncher, ASignalBeforeAConnectionBeginsReachesItAfterItsHeader) {
  Launch l;
  l.start(Launch::plan(2, true), 10ms);
  l.later(10ms);
  l.launcher->on_signal(SIGUSR1);
  l.later(10ms);
  ASSERT_EQ(l.starter.children.size(), 2U);
  EXPECT_EQ(l.channel(0), header_bytes(l.header) + static_cast<char>(SIGUSR1));
  EXPECT_EQ(l.channel(1), header_bytes(l.header) + static_cast<char>(SIGUSR1));
}

TEST(HostsLauncher, AStopSignalStartsNoMoreConnections) {
  Launch l;
  l.start(Launch::plan(3, true), 10ms);
  l.later(10ms);
  l.launcher->on_signal(SIGTERM);
  l.later(100ms);
  EXPECT_EQ(l.starter.children.size(), 1U);
  l.end(0, code(143));
  EXPECT_TRUE(l.launcher->done());
  EXPECT_EQ(l.launcher->exit_code(), 143);
}

TEST(HostsLauncher, AnAgentThatFailedAloneHasTheOthersStoppedAfterTheGrace) {
  Launch l;
  l.start(Launch::plan(3));
  for (size_t i = 0; i < 3; ++i) {
    l.ready(i);
    l.channel(i);
  }
  l.end(1, code(3));
  EXPECT_EQ(l.launcher->next_deadline(), l.clock.t + HostsLauncher::k_stop_grace);
  l.later(1999ms);
  EXPECT_EQ(l.channel(0), "");
  l.later(1ms);
  EXPECT_TRUE(
      l.log.has("node 1 (h1, over ssh) ended with exit code 3 and the other nodes still "
                "run: stopping them"))
      << l.log.all();
  EXPECT_EQ(l.channel(0), std::string(1, k_channel_stop));
  EXPECT_EQ(l.channel(2), std::string(1, k_channel_stop));
  EXPECT_FALSE(l.launcher->next_deadline());
  l.end(0, code(143));
  l.end(2, code(143));
  EXPECT_EQ(l.launcher->exit_code(), 3);
}

TEST(HostsLauncher, AFailedHealthCheckMakesTheCodeFiveWhateverEndedFirst) {
  Launch l;
  l.start(Launch::plan(2));
  l.ready(0);
  l.ready(1);
  l.end(0, code(k_exit_rendezvous));
  l.end(1, code(k_exit_unhealthy));
  EXPECT_EQ(l.launcher->exit_code(), k_exit_unhealthy);
}

TEST(HostsLauncher, TheUpstreamChannelsBytesArePassedOnAndItsEndEndsEveryChannel) {
  Launch l;
  auto pipe = posix::make_pipe();
  l.upstream.emplace();
  l.upstream->fd = std::move(pipe.read);
  l.upstream->pending = std::string(1, static_cast<char>(SIGUSR2));  // came with its header
  l.start(Launch::plan(2));
  EXPECT_EQ(l.channel(0), header_bytes(l.header) + static_cast<char>(SIGUSR2));
  EXPECT_EQ(l.channel(1), header_bytes(l.header) + static_cast<char>(SIGUSR2));
  const char term = SIGTERM;
  ASSERT_EQ(::write(pipe.write.get(), &term, 1), 1);
  l.poll();
  EXPECT_EQ(l.channel(1), std::string(1, term));
  pipe.write.close();
  l.poll();
  EXPECT_EQ(l.channel(0), std::string(1, term) + "<EOF>");
  EXPECT_EQ(l.channel(1), "<EOF>");
}

// Node 0's host died: the others say so on their channel in place of a
// report each, and the command reports it once, naming node 0's host.
TEST(HostsLauncher, NodeZeroLostIsReportedOnceNamingItsHost) {
  Launch l;
  l.start(Launch::plan(3));
  for (size_t i = 0; i < 3; ++i) {
    l.ready(i);
  }
  EXPECT_EQ(l.launcher->closing_report(), "");
  const std::string why = "lost contact with the store at h0:29500";
  l.say(1, std::string(k_agent_node_0_lost) + why + "\nworker line\n");
  l.say(2, std::string(k_agent_node_0_lost) + "another word\n");
  l.end(1, code(4));
  l.end(2, code(4));
  l.later(HostsLauncher::k_stop_grace);
  EXPECT_FALSE(l.log.has("stopping them")) << l.log.all();
  l.end(0, code(255));
  EXPECT_EQ(l.console.out, "worker line\n") << "the channel's lines stay off the console";
  EXPECT_EQ(l.launcher->exit_code(), 4);
  EXPECT_EQ(l.launcher->closing_report(),
            "ddplaunch: job failed: node 0 (h0, over ssh) was lost (its host died, or its agent "
            "was killed): " +
                why + "; every other node stopped its workers\nddplaunch: exit code 4\n");
}

TEST(HostsLauncher, ASubtreeRootPassesReadyLinesUpAndTellsNoProgress) {
  Launch l;
  auto pipe = posix::make_pipe();
  l.upstream.emplace();
  l.upstream->fd = std::move(pipe.read);
  l.start(Launch::plan(2));
  l.ready(1);
  EXPECT_EQ(l.console.out, std::string(k_agent_ready) + "1\n");
  EXPECT_FALSE(l.launcher->next_deadline());
  l.later(10s);
  EXPECT_TRUE(l.log.lines.empty()) << l.log.all();
  // Node 0 lost: passed up too, for the command at the top to report.
  l.say(1, std::string(k_agent_node_0_lost) + "gone\n");
  EXPECT_EQ(l.console.out,
            std::string(k_agent_ready) + "1\n" + std::string(k_agent_node_0_lost) + "gone\n");
  EXPECT_EQ(l.launcher->closing_report(), "");
}

// Node 0 directly, and nodes 1-3 through a subtree's root on h1 (--fanout).
HostsPlan plan_with_subtree() {
  HostsPlan p = Launch::plan(1);
  AgentStart root;
  root.node_rank = 1;
  root.hosts = 3;
  root.host = "h1";
  root.argv = {"ssh", "h1", "ddplaunch", "--subtree", "1"};
  p.starts.push_back(root);
  p.nnodes = 4;
  return p;
}

TEST(HostsLauncher, ATreeFansOutThroughSubtreeRootsThatCountTheirNodes) {
  Launch l;
  l.start(plan_with_subtree());
  l.ready(0);
  l.say(1, std::string(k_agent_ready) + "1\n" + std::string(k_agent_ready) + "2\n");
  l.later(2s);
  EXPECT_TRUE(l.log.has("ssh: 3/4 connected, waiting for h1\n")) << l.log.all();
  l.say(1, std::string(k_agent_ready) + "3\n");
  EXPECT_TRUE(l.log.has("all 4 nodes started")) << l.log.all();
}

TEST(HostsLauncher, ASubtreeThatFailsBeforeAllItsNodesStartedStopsTheJob) {
  Launch l;
  l.start(plan_with_subtree());
  l.ready(0);
  l.channel(0);
  l.say(1, std::string(k_agent_ready) + "1\n");
  l.end(1, code(3));
  EXPECT_TRUE(
      l.log.has("nodes 1-3 (through h1) could not be started: it ended with exit code 3 "
                "before it started"))
      << l.log.all();
  EXPECT_EQ(l.channel(0), std::string(1, k_channel_stop));
}

TEST(HostsLauncher, OtherHeadersWaitForNodeZerosStorePort) {
  Launch l;
  l.make();
  l.launcher->hold_headers_for_store_port(l.header);
  l.start(Launch::plan(3));
  EXPECT_EQ(l.channel(0), header_bytes(l.header));
  EXPECT_EQ(l.channel(1), "");
  l.launcher->on_signal(SIGUSR1);  // sent now, after the header when it goes
  l.say(0, std::string(k_agent_store_port) + "41234\n");
  ChannelHeader with_port = l.header;
  with_port.store_port = 41234;
  EXPECT_EQ(l.channel(1), header_bytes(with_port) + static_cast<char>(SIGUSR1));
  EXPECT_EQ(l.channel(2), header_bytes(with_port) + static_cast<char>(SIGUSR1));
  EXPECT_EQ(l.console.out, "");  // the port line is the launcher's, not shown
}

TEST(HostsLauncher, NodeZeroEndingWithoutItsPortReleasesTheHeadersAndStopsTheJob) {
  Launch l;
  l.make();
  l.launcher->hold_headers_for_store_port(l.header);
  l.start(Launch::plan(2));
  l.channel(0);
  l.end(0, code(1));
  EXPECT_EQ(l.channel(1), header_bytes(l.header) + k_channel_stop);
  l.end(1, code(143));
  EXPECT_EQ(l.launcher->exit_code(), k_exit_rendezvous);
}

TEST(HostsLauncher, ASlowConsolePausesTheAgentsOutputUntilItHasRoom) {
  Launch l;
  l.start(Launch::plan(1));
  l.console.behind = true;
  l.say(0, "first\n");
  l.say(0, "second\n");
  EXPECT_EQ(l.console.out, "first\n");  // the pipe waits: the agent blocks, no line is dropped
  l.launcher->on_console_room();
  l.poll();
  EXPECT_EQ(l.console.out, "first\n");  // still behind
  l.console.behind = false;
  l.launcher->on_console_room();
  l.poll();
  EXPECT_EQ(l.console.out, "first\nsecond\n");
}

TEST(HostsLauncher, TheJobIsDoneOnlyOnceEveryPipeIsEmpty) {
  Launch l;
  l.start(Launch::plan(1));
  l.ready(0);
  ASSERT_EQ(::write(l.child(0).out.get(), "last words", 10), 10);
  l.starter.exits.emplace_back(l.child(0).pid, code(0));
  l.launcher->on_signal(SIGCHLD);
  EXPECT_FALSE(l.launcher->done());  // its stdout is still open
  l.child(0).out.close();
  l.child(0).err.close();
  l.poll();
  EXPECT_TRUE(l.launcher->done());
  EXPECT_EQ(l.console.out, "last words");  // the unfinished line too
  EXPECT_EQ(l.launcher->exit_code(), k_exit_ok);
}

TEST(HostsLauncher, SparesAreStoppedOnceEveryMemberEndedAndSayNothingOfTheCode) {
  Launch l;
  l.make({.elastic = true, .max_nodes = 2, .via = "local"});
  l.start(Launch::plan(3));
  for (size_t i = 0; i < 3; ++i) {
    l.ready(i);
    l.channel(i);
  }
  l.end(0, code(0));
  EXPECT_EQ(l.channel(2), "");
  l.end(1, code(0));
  EXPECT_EQ(l.channel(2), std::string(1, k_channel_stop));
  l.end(2, code(143));
  EXPECT_EQ(l.launcher->exit_code(), k_exit_ok);
}

TEST(HostsLauncher, AProgramThatCannotBeExecutedIsA127Error) {
  Launch l;
  l.starter.missing = {"ssh"};
  l.make();
  try {
    l.launcher->start_all(Launch::plan(1), "h", {});
    FAIL() << "started";
  } catch (const LaunchError& e) {
    EXPECT_EQ(e.exit_code(), k_exit_cannot_execute);
  }
}

TEST(HostsLauncher, TheLaunchersEndClosesEveryChannel) {
  Launch l;
  l.start(Launch::plan(2));
  l.channel(0);
  l.channel(1);
  l.launcher.reset();  // as when an error ends the command
  EXPECT_EQ(l.channel(0), "<EOF>");
  EXPECT_EQ(l.channel(1), "<EOF>");
}

TEST(HostsLauncher, AnAgentThatEndedIsSentNothingMore) {
  Launch l;
  l.start(Launch::plan(2));
  l.ready(0);
  l.ready(1);
  l.channel(1);
  l.child(1).channel.close();  // its stdin is gone with it
  l.end(1, code(0));
  l.launcher->on_signal(SIGUSR1);  // no write to a closed pipe, no error
  EXPECT_EQ(l.channel(0).back(), static_cast<char>(SIGUSR1));
}

}  // namespace
}  // namespace ddplaunch
