// Driver: the launcher's one event loop, and every wait it makes. Its epoll
// always watches the signalfd, so a stop signal is read whatever the launcher
// is waiting for: the PMIx exchange before the Agent exists
// (wait_readable()), the run (run(): the workers' pipes, their exits, the
// store connection, the console's room, every timer), an internal error's
// last word to the other nodes (publish_failure()) and the exit drain
// (drain()). It dispatches each ready fd to its owner: the workers' pipes to
// a StreamPump whose sink is the Agent, the store's socket to the link's
// connection. Nothing it calls waits on the network or a child; `--log-dir`
// files and filter files are written with plain blocking writes. Not
// thread-safe: the main thread owns it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/agent.hpp"
#include "output/console.hpp"
#include "output/pump.hpp"
#include "posix/event_loop.hpp"
#include "posix/signals.hpp"
#include "proc/spawner.hpp"
#include "rendezvous/preflight.hpp"
#include "rendezvous/store_link.hpp"
#include "store/async_client.hpp"

namespace ddplaunch {

class Driver {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Both must outlive the Driver; `signals` holds every signal the launcher handles.
  Driver(posix::SignalFd& signals, ConsoleWriter& console);
  ~Driver();

  // Waits until `fd` is readable (true) or `deadline` passes (false). A stop
  // signal throws LaunchError 128+N, "stopped by SIG... while <doing>"; a
  // forwarded signal (SIGUSR1/2) has no worker to reach yet and is dropped.
  bool wait_readable(int fd, TimePoint deadline, const std::string& doing);

  // Drives `agent` (and, on several nodes, its link and the link's
  // connection) until it is done. `fault` (DDPLAUNCH_FAULT=output, for
  // tests): an internal error at a worker's first output, as a node that
  // breaks mid-run. Each argument must outlive the Driver.
  void run(Agent& agent, ProcessSpawner& spawner, StoreLink* link, AsyncClient* store, bool fault);
  // Calls `serve` (once) when `listen_fd` first has a connection waiting:
  // a one-node job's store gets its thread only if a worker uses it.
  void serve_when_connected(int listen_fd, std::function<void()> serve);
  // Calls `pump` whenever `fd` is readable (the PMIx relay's epoll, which
  // outlives the Driver's run).
  void watch_relay(int fd, std::function<void()> pump);
  // Drives `store` from here on, in a job without a link (one node): the
  // agent's own connection to its workers' store, made once someone uses
  // that store (`ddplaunch status`). It must outlive the Driver's run.
  void watch_client(AsyncClient* store);
  // Calls `serve` whenever `fd` is readable: --metrics-port's listener,
  // which outlives the Driver's run.
  void watch_http(int fd, std::function<void()> serve);
  // Watches the PMIx server's queue (`fd`, readable while it holds
  // something) from here on: run() then calls Agent::on_mpi().
  void watch_mpi(int fd);
  // Drives the network preflight's connects (`probe` outlives the Driver)
  // from here on: its fd while connects are in flight, its deadline.
  void watch_probe(NetworkProbe* probe) { m_probe = probe; }

  // After run() threw: tells the other nodes at once (a verdict naming this
  // node's error, and no results from it, so node 0 waits for none), waiting
  // at most 1 s for the store to confirm. Best effort: the error itself is
  // what this node reports.
  void publish_failure(const std::string& message);

  // The console's exit drain; a stop signal ends it at once and is returned.
  std::optional<int> drain();

 private:
  class WorkerStreams;  // the pump's sink: the Agent
  void sync_fds();
  void sync_worker_fds();
  void sync_store_fd();
  void sync_probe_fd();
  std::optional<TimePoint> next_deadline() const;
  void dispatch(const posix::EventLoop::Ready& ready);
  void reap();

  posix::SignalFd& m_signals;
  ConsoleWriter& m_console;
  posix::EventLoop m_loop;
  // Set by run().
  Agent* m_agent = nullptr;
  ProcessSpawner* m_spawner = nullptr;
  StoreLink* m_link = nullptr;
  AsyncClient* m_store = nullptr;  // the link's connection
  int m_store_fd = -1;             // the store's socket as the loop holds it
  int m_store_attempt = 0;         // the client's connect attempt that opened it
  NetworkProbe* m_probe = nullptr;
  int m_probe_fd = -1;  // the probe's epoll as the loop holds it
  uint64_t m_generation_watched = 0;
  // The workers' stdout, stderr and progress pipes (stream 3 * local rank +
  // 0, 1, 2), read into the Agent.
  std::unique_ptr<WorkerStreams> m_sink;
  std::unique_ptr<StreamPump> m_pump;
  int m_serve_fd = -1;  // serve_when_connected()'s listener, until a client comes
  std::function<void()> m_serve;
  std::function<void()> m_relay;  // watch_relay()'s
  std::function<void()> m_http;   // watch_http()'s
};

}  // namespace ddplaunch
