// Driver: the launcher's one event loop, and every wait it makes. Its loop
// always watches the signalfd, so a stop signal is read whatever the
// launcher is waiting for: the PMIx exchange before the Agent exists
// (wait_readable()), the run (run()), an internal error's last word to the
// other nodes (publish_failure()) and the exit drain (drain()). The Driver
// keeps the round's processes: it starts nothing itself, but it reads the
// signals (a worker's exit is reaped here and told to the Agent once what
// it wrote is read), feeds a new round's pipes to the StreamPump, and
// tells the Agent the time. Everything else with fds or timers on the loop
// registers itself there as an owner (posix/event_loop.hpp) and gets its
// own events: the pump its pipes, the store connection its socket
// (store/client_on_loop.hpp), the link its timers, the preflight's probe,
// the HTTP server, the PMIx server's queue and relay. Nothing it calls
// waits on the network or a child; `--log-dir` files and filter files are
// written with plain blocking writes. Not thread-safe: the main thread owns
// it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/agent.hpp"
#include "output/console.hpp"
#include "output/pump.hpp"
#include "posix/event_loop.hpp"
#include "posix/signals.hpp"
#include "proc/spawner.hpp"
#include "rendezvous/store_link.hpp"
#include "store/client_on_loop.hpp"

namespace ddplaunch {

class Driver : private posix::EventLoop::Owner {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Both must outlive the Driver; `signals` holds every signal the launcher handles.
  Driver(posix::SignalFd& signals, ConsoleWriter& console);
  ~Driver() override;

  // The loop every owner attaches to; it outlives them all.
  posix::EventLoop& loop() { return m_loop; }

  // Waits until `fd` is readable (true) or `deadline` passes (false). A stop
  // signal throws LaunchError 128+N, "stopped by SIG... while <doing>"; a
  // forwarded signal (SIGUSR1/2) has no worker to reach yet and is dropped.
  // Nothing else on the loop is served meanwhile.
  bool wait_readable(int fd, TimePoint deadline, const std::string& doing);
  // Waits until `child` (started by the caller, its output on Child::out())
  // ends, or `deadline` passes (nullopt; it runs on). What it writes is read
  // by a StreamPump on this loop and handed to `on_output`; its end comes
  // from the signalfd's SIGCHLD (reap_any; another child reaped meanwhile is
  // handed to the Agent later, as if reaped then); what its pipe holds then
  // is read, but not what a process it left behind may still write. The
  // child is not marked reaped: the caller may still signal its group. Stop
  // signals throw as in wait_readable(); nothing else is served.
  std::optional<ExitInfo> wait_child(Child& child,
                                     const std::function<void(std::string_view)>& on_output,
                                     TimePoint deadline, const std::string& doing);

  // Drives `agent` until it is done: the loop's turns, the workers' exits,
  // the Agent's time. `fault` (DDPLAUNCH_FAULT=output, for tests): an
  // internal error at a worker's first output, as a node that breaks
  // mid-run. Each argument must outlive the Driver.
  void run(Agent& agent, WorkerChildren& spawner, bool fault);
  // A debugger the run reaps goes to `ended` first (`ddplaunch stacks`'
  // room: true when it started it), else to the Agent (a hung rank's).
  void claim_debuggers(std::function<bool(pid_t)> ended) { m_debuggers = std::move(ended); }
  // Calls `serve` (once) when `listen_fd` first has a connection waiting:
  // a one-node job's store gets its thread only if a worker uses it.
  void serve_when_connected(int listen_fd, std::function<void()> serve);

  // After run() threw: tells the other nodes at once through `link` over
  // `store` (a verdict naming this node's error, and no results from it,
  // so node 0 waits for none), waiting at most 1 s for the store to
  // confirm; nothing but the store and the console is served meanwhile.
  // Best effort: the error itself is what this node reports.
  void publish_failure(StoreLink* link, ClientOnLoop* store, const std::string& message);

  // The console's exit drain; a stop signal ends it at once and is returned.
  std::optional<int> drain();

 private:
  class WorkerStreams;  // the pump's sink: the Agent
  // EventLoop::Owner: the signalfd, the console's wake-up, the listener
  // serve_when_connected() waits on, and a new round's pipes (prepare()).
  void prepare() override;
  void on_ready(uint64_t tag, uint32_t events) override;
  void sync_worker_fds();
  void on_signals();
  void reap();
  // A stop signal among those read: throws as wait_readable() says; a
  // SIGCHLD read makes a reap due.
  void read_signals_while(const std::string& doing);
  std::optional<std::pair<pid_t, ExitInfo>> next_reaped();

  posix::SignalFd& m_signals;
  ConsoleWriter& m_console;
  posix::EventLoop m_loop;
  uint64_t m_tag;  // this owner's tag base
  // Set by run().
  Agent* m_agent = nullptr;
  WorkerChildren* m_spawner = nullptr;
  uint64_t m_generation_watched = 0;
  // The workers' stdout, stderr and progress pipes (stream 3 * local rank +
  // 0, 1, 2), read into the Agent's router.
  std::unique_ptr<WorkerStreams> m_sink;
  std::unique_ptr<StreamPump> m_pump;
  int m_serve_fd = -1;  // serve_when_connected()'s listener, until a client comes
  std::function<void()> m_serve;
  // Children wait_child() reaped that were not its own, for reap().
  std::vector<std::pair<pid_t, ExitInfo>> m_reaped_early;
  std::function<bool(pid_t)> m_debuggers;  // claim_debuggers()'
  // A wait read a SIGCHLD: the run reaps at its next turn.
  bool m_reap_due = false;
};

}  // namespace ddplaunch
