// PmixRelay: the address a node's workers are given for their PMIx server
// before that server exists. It listens on loopback; a worker's MPI_Init
// connects to it, and the relay carries the bytes both ways to the real
// server (libpmix's own listener) once that one runs. So the launcher starts
// libpmix only when a worker first connects: a job of programs that never
// call MPI_Init never loads it, and an MPI job's workers do not wait for it
// to start. A client's first bytes wait in the relay (bounded) until the
// server's address is known. It admits what libpmix's own listener admits:
// any local process, which then proves to libpmix that it is a registered
// client (over TCP, libpmix's "native" security checks the uid and gid the
// client states; SO_PEERCRED says nothing of a TCP peer).
// Its sockets sit in an epoll of their own, whose fd the agent's loop
// watches. Not thread-safe: the agent's thread drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "posix/event_loop.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

class PmixRelay {
 public:
  // Listens on 127.0.0.1 (any free port); throws std::system_error.
  PmixRelay();

  int port() const { return m_port; }
  // Readable when pump() has something to do.
  int fd() const { return m_loop.fd(); }

  // Called (once) when the first client arrives while no server is known.
  void on_first_client(std::function<void()> fn) { m_first_client = std::move(fn); }
  // The server's host:port: every waiting client is connected to it, and
  // every later one at once.
  void set_server(const std::string& host, int port);
  // No server will come: every client is closed (their MPI_Init fails).
  void refuse_clients();

  // Accepts clients and moves bytes, without blocking.
  void pump();

  size_t clients() const { return m_pairs.size(); }

  // At most this many bytes wait in each direction of a connection; the
  // relay stops reading a side whose bytes the other cannot take.
  static constexpr size_t k_buffer_bytes = 1u << 20;

 private:
  struct Side {
    posix::Fd fd;
    std::string out;      // bytes to write to this side
    size_t sent = 0;      // of `out`
    bool eof = false;     // this side has said it sends no more
    bool shut = false;    // this side was told no more is coming
    uint32_t events = 0;  // what the loop watches
  };
  struct Pair {
    Side client;
    Side server;
    bool connecting = false;  // the server side's connect is in flight
  };
  void accept_clients();
  // Starts the pair's connect to the server; false (said) when it cannot.
  bool connect_server(Pair& pair);
  // Moves what `from` has to `to`'s queue; false when the pair is done.
  bool read_side(Side& from, Side& to);
  bool flush(Side& to, const Side& from);
  void update(uint64_t id, Pair& pair);
  void close_pair(uint64_t id);
  void handle(uint64_t tag, uint32_t events);

  posix::EventLoop m_loop;
  posix::Fd m_listener;
  int m_port = 0;
  std::string m_server_host;
  int m_server_port = 0;
  bool m_refused = false;
  std::function<void()> m_first_client;
  std::unordered_map<uint64_t, Pair> m_pairs;
  uint64_t m_next_id = 1;
};

}  // namespace ddplaunch
