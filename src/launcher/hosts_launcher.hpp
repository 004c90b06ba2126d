// HostsLauncher: the launching command's state machine (`--hosts`,
// `--hostfile`, `--launcher local`, a subtree's root). It starts the plan's
// processes (agents here or over ssh, subtree roots) through a ChildStarter,
// writes each its channel header and then every signal byte on its stdin,
// reads their output through a StreamPump into lines for the console
// (counting the agents that say they started, taking node 0's store port),
// tells how the connecting goes, stops every node when one cannot be
// started or failed alone, and says the job's exit code once every process
// has ended and its pipes are empty.
//
// It rides the caller's EventLoop under tags below k_tags_below; the caller
// reads the signals and the console's wake (run_hosts_launcher() does) and
// hands the rest to on_ready(). Time comes from a Clock. Every reference
// must outlive it. Not thread-safe: the loop's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/agent_channel.hpp"
#include "launcher/plan.hpp"
#include "output/console.hpp"
#include "output/lines.hpp"
#include "output/pump.hpp"
#include "posix/clock.hpp"
#include "posix/event_loop.hpp"
#include "posix/signals.hpp"
#include "proc/starter.hpp"
#include "supervise/exit_info.hpp"

namespace ddplaunch {

class HostsLauncher : public StreamPump::Sink {
 public:
  using TimePoint = Clock::TimePoint;
  static constexpr uint64_t k_tags_below = 1ULL << 61;

  // The first progress line after this long, then one every k_progress_every.
  static constexpr auto k_progress_after = std::chrono::seconds(2);
  static constexpr auto k_progress_every = std::chrono::seconds(5);
  // How long agents may run on after one failed before this command stops them.
  static constexpr auto k_stop_grace = std::chrono::seconds(2);

  struct Options {
    // --nnodes MIN:MAX: a host that cannot be started is left out, and the
    // hosts after MAX start as spares.
    bool elastic = false;
    int max_nodes = std::numeric_limits<int>::max();
    std::string via = "ssh";  // "ssh" or "local", for the progress lines
  };

  // `upstream`: the channel from the launching command above, whose bytes
  // are passed on (nullptr at the top).
  HostsLauncher(posix::EventLoop& loop, ChildStarter& starter, const Clock& clock,
                ConsoleSink& console, AgentChannel* upstream, Options options);
  ~HostsLauncher() override;
  HostsLauncher(const HostsLauncher&) = delete;
  HostsLauncher& operator=(const HostsLauncher&) = delete;

  // Node 0's agent picks its store's port (--pick-store-port): every other
  // agent's header, `header` with that port, waits until node 0 says it.
  void hold_headers_for_store_port(ChannelHeader header) { m_held_header = std::move(header); }
  // Starts `plan`'s processes, each given `header` on its channel. Direct
  // starts begin at once; with a `connect_cost` (a simulation's), the
  // connections begin one per `connect_cost`, as the CPU cost of an ssh
  // handshake serialises them on the host that opens them. Throws
  // LaunchError (127) when a process cannot be executed.
  void start_all(const HostsPlan& plan, std::string header,
                 std::chrono::milliseconds connect_cost = {});

  // --- events -----------------------------------------------------------
  // Whether `tag` (from the loop) is one of this launcher's.
  bool owns(uint64_t tag) const { return tag < k_tags_below; }
  void on_ready(const posix::EventLoop::Ready& ready);
  // A signal this command received: SIGCHLD reaps; any other goes to every
  // agent, which acts on it as if it had received it.
  void on_signal(int sig);
  // The console has room again: paused streams are read again.
  void on_console_room() { m_pump.on_console_room(); }
  // Call once now >= next_deadline().
  void on_time();
  std::optional<TimePoint> next_deadline() const;

  // Every started process has ended and its pipes are empty.
  bool done() const;
  // The job's exit code: the first agent to end with a failure says it
  // (they agree on the job's verdict, and one that failed alone ended
  // first), but a node that failed its health check makes it 5, however
  // soon the others ended with 3 for it; this command's own 3 when a node
  // could not be started; 4 when only ssh connections failed (each agent
  // ended by its dropped channel); 128+N after a stop signal.
  int exit_code() const;
  // What this command reports itself once every process ended: where node
  // 0 was lost (its host died, its agent was killed), the one report for
  // every node, which said why in place of reports of their own; empty
  // otherwise (node 0's report spoke for the job).
  std::string closing_report() const;

  // --- StreamPump::Sink: the started processes' output ------------------
  void on_bytes(StreamPump::Id id, std::string_view data) override;
  void on_closed(StreamPump::Id id) override;

 private:
  // One process this command started: an agent (here, or over ssh) or a
  // subtree's root.
  struct Started {
    Started(AgentStart s, Child c) : start(std::move(s)), child(std::move(c)) {}
    AgentStart start;
    Child child;
    std::string to_write;  // channel bytes not yet taken by its stdin
    bool held = false;     // its header waits for node 0's store port
    LineSplitter out_lines, err_lines;
    int ready = 0;                 // nodes of it that said they started
    bool store_port_said = false;  // node 0's agent said its store's port (once)
    std::optional<ExitInfo> exit;
    std::string last_error;  // its last stderr line
    std::string ssh_said;    // the last line ssh itself wrote
    // A stderr line: kept to explain a failure, and as ssh's own word when it is one.
    void note_error_line(std::string_view line);
  };
  bool starting() const;
  bool spare(const Started& s) const;
  void start_due(TimePoint now);
  void start_one(const AgentStart& s);
  void send_to_all(const std::string& bytes);
  void release_headers(int store_port);
  void read_upstream();
  void flush_in(size_t index);
  void on_line(Started& s, bool is_out, std::string_view text, LineEnd end);
  void on_exit(Started& s);
  void on_start_failed(const Started& s);
  void on_agent_failed(const Started& s);
  void stop_idle_spares();
  void say_progress();
  bool telling_progress() const;

  posix::EventLoop& m_loop;
  ChildStarter& m_starter;
  const Clock& m_clock;
  ConsoleSink& m_console;
  AgentChannel* m_upstream;
  const Options m_options;
  std::optional<std::string> m_node_0_lost;  // why, as the first node that heard it said
  StreamPump m_pump;                         // stream 2 * index + 0 (stdout) or 1 (stderr)
  std::vector<AgentStart> m_plan;
  std::string m_header;
  std::optional<ChannelHeader> m_held_header;  // hold_headers_for_store_port()'s, until released
  std::string m_sent;  // the signal bytes sent so far, for what starts later
  std::chrono::milliseconds m_connect_cost{0};
  TimePoint m_next_start;          // when the next simulated connection may begin
  std::vector<Started> m_started;  // m_plan's first ones, in order
  int m_total_nodes = 0;
  int m_ready_nodes = 0;
  bool m_job_over = false;  // every member ended: the spares are not needed
  bool m_stopping = false;  // k_channel_stop sent (or relayed from above)
  bool m_failed = false;
  bool m_failed_start = false;
  std::optional<int> m_stop_signal;
  std::optional<int> m_first_failure;  // the first agent's failing exit code
  std::optional<TimePoint> m_stop_at;  // when to stop agents a failure left running
  bool m_stop_sent = false;            // ... and they were
  std::string m_stop_reason;
  TimePoint m_started_at;
  TimePoint m_next_progress;
};

// Runs `launcher` on `loop` until it is done: reads `signals` into
// on_signal() and the console's wake into on_console_room(), waits until the
// next deadline. `signals` and `console` are registered here.
void run_hosts_launcher(HostsLauncher& launcher, posix::EventLoop& loop, posix::SignalFd& signals,
                        ConsoleWriter& console);

}  // namespace ddplaunch
