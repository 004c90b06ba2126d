// StoreServer: the TCP key-value store a multi-node job rendezvouses through
// (PyTorch c10d TCPStore's role, with ddplaunch's own protocol: protocol.hpp).
// One background thread runs one epoll loop over every connection; blocking
// GET and WAIT are parked on the server until the keys exist or time out, so
// clients never poll. A bad or oversized frame costs only that client its
// connection. Every resource is bounded (protocol.hpp's limits and
// StoreOptions): stored bytes, buffered input, queued output, connections,
// time to finish a frame or the handshake; no wake-up path recurses; accept
// errors such as EMFILE back off instead of spinning. The server's state is touched only by its own
// thread; the public methods are called from the one thread that owns the server.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "posix/fd.hpp"

namespace ddplaunch {

// What the store admits and how much it holds (docs/SECURITY.md).
struct StoreOptions {
  // The job's secret: when set, a client must prove it knows it (store/auth.hpp).
  std::string token;
  // A second credential the store admits as well: the workers'
  // (auth::worker_token()), so that they never see the job's. Empty: none.
  std::string worker_token;
  // Clients past the handshake at once; one more is told BUSY and closed (a
  // node then tries again until its --rdzv-timeout).
  int max_clients = 4096;
  // Connections that have not finished the handshake: a newer one past this
  // closes the oldest, so a flood of them delays a node but never holds a
  // slot or much memory (each holds at most a handshake's frame).
  int max_handshakes = 64;
  // How long a connection in the full pool is left to finish its handshake
  // before a newer one may take its place.
  std::chrono::milliseconds handshake_grace{100};
  // A connection must finish HELLO (and AUTH) within this, and a frame once
  // begun must arrive within it.
  std::chrono::milliseconds handshake_timeout{10'000};
  // Replies queued for one client past which its further requests wait, and
  // it is not read, until it reads them (a client that pipelines GETs and
  // never reads costs at most this plus one reply).
  size_t out_high_water = 4 * 1024 * 1024;
  // A client whose replies pile up unread this long is cut off.
  std::chrono::milliseconds stall_timeout{30'000};
  // Listen at once, but start the thread only at serve(): a client that
  // connects before waits in the listen backlog. For a store that must cost
  // nothing before the workers start.
  bool serve_later = false;
};

class StoreServer {
 public:
  // Its listen backlog: every node connects at once (the kernel's somaxconn
  // may cap it).
  static constexpr int k_backlog = 4096;

  // Listens on host:port (port 0 = any free port) and starts serving
  // (unless options.serve_later).
  // Throws std::system_error when the address cannot be bound.
  StoreServer(const std::string& host, int port, StoreOptions options = {});
  // Serves on `listener`, a listening socket (posix::listen_tcp,
  // posix::listen_anywhere).
  StoreServer(posix::Fd listener, StoreOptions options);
  ~StoreServer();  // stop()s
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // The first hosts whose clients it refused (at most 5), each as
  // "HOST (why)": the nodes a rendezvous timeout should name. Any thread.
  std::vector<std::string> refused_hosts() const;
  // The listening socket (watch it for a first client, then serve()).
  int listen_fd() const;
  // Starts the thread (with serve_later). Idempotent.
  void serve();
  // Closes every connection and joins the thread. Idempotent.
  void stop();
  // Waits until no client is connected (true) or `timeout` passes (false):
  // the store's host, leaving, lets the other nodes read the job's verdict
  // first. Thread-safe.
  bool wait_until_idle(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace ddplaunch
