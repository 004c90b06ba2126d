// StoreServer: the TCP key-value store a multi-node job rendezvouses through
// (PyTorch c10d TCPStore's role, with ddplaunch's own protocol: protocol.hpp).
// One background thread runs one epoll loop over every connection; blocking
// GET and WAIT are parked on the server until the keys exist or time out, so
// clients never poll. A bad or oversized frame costs only that client its
// connection. The server's state is touched only by its own thread; the
// public methods are called from the one thread that owns the server.
#pragma once

#include <memory>
#include <string>

namespace ddplaunch {

class StoreServer {
 public:
  // Listens on host:port (port 0 = any free port) and starts serving.
  // Throws std::system_error when the address cannot be bound.
  StoreServer(const std::string& host, int port);
  ~StoreServer();  // stop()s
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // Closes every connection and joins the thread. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace ddplaunch
