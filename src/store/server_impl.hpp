// StoreServer's private parts, shared by its two files: the connection
// state (Conn), the helpers both use, and Impl (the server's one thread and
// its state). server.cpp has the loop and the data path; server_admission.cpp
// accepting, the handshake, the client slots and the refusals. Private to
// store/; the server thread's alone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "posix/fd.hpp"
#include "store/auth.hpp"
#include "store/kv_core.hpp"
#include "store/protocol.hpp"
#include "store/server.hpp"

namespace ddplaunch {

namespace store_server {

using Steady = std::chrono::steady_clock;

struct Conn {
  posix::Fd fd;
  std::string peer;  // "addr:port", for the master's warnings
  std::string in;
  std::string out;
  bool hello = false;
  bool authed = false;   // HELLO done, and AUTH where the store has a token
  bool closing = false;  // close once `out` is flushed
  bool reading = true;
  uint32_t events = 0;  // what epoll watches for it (update_events changes it only when it differs)
  bool evicted = false;  // replaced by a newer handshake (a flood), not refused
  bool reset = false;    // the client reset it: it left (gave up waiting), not refused
  bool worker = false;   // authenticated with the workers' credential: scoped
  std::string client_nonce;
  std::string server_nonce;
  uint64_t serial = 0;  // in accept order: the oldest handshake goes first
  // The authenticated session, from AUTH on (a store with a token).
  std::optional<auth::FrameMac> mac_in;
  std::optional<auth::FrameMac> mac_out;
  Steady::time_point opened;
  Steady::time_point last_input;   // the last bytes received
  Steady::time_point last_output;  // the last bytes sent (or when `out` last was empty)
};

// True when a whole request waits in the input buffer (or an oversized one,
// which process() turns into an error).
inline bool has_frame(const Conn& c) {
  try {
    return protocol::complete_frame(c.in).has_value();
  } catch (const protocol::ProtocolError&) {
    return true;
  }
}

// Appends a reply (sealed in a session); the stall clock starts when the
// queue stops being empty.
inline void queue(Conn& c, const std::string& reply) {
  if (c.out.empty()) {
    c.last_output = Steady::now();
  }
  if (c.mac_out) {
    c.mac_out->seal(reply, c.out);
  } else {
    c.out += reply;
  }
}

// What a connection may hold of a frame not yet complete: before the
// handshake is done, no more than HELLO or AUTH can need.
inline size_t input_limit(const Conn& c) {
  return c.authed ? protocol::k_max_frame + protocol::k_frame_tag + 4
                  : protocol::k_max_handshake_frame + 4;
}

inline std::string host_of(const std::string& peer) {
  auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

}  // namespace store_server

struct StoreServer::Impl {
  using Steady = store_server::Steady;
  using Conn = store_server::Conn;
  StoreOptions options;
  posix::Fd listener;
  posix::Fd epoll;
  posix::Fd wake;  // eventfd: stop()
  int port = 0;
  std::thread thread;
  bool stopped = false;
  std::unordered_map<int, Conn> conns;
  // How many are open, for wait_until_idle() on another thread.
  std::mutex count_mutex;
  std::condition_variable count_changed;
  size_t open_count = 0;
  void count_connections() {
    {
      std::lock_guard lock(count_mutex);
      open_count = conns.size();
    }
    count_changed.notify_all();
  }
  KvCore core;  // the keys, the parked requests, the ON_CLOSE words
  // Connections with new replies: flushed by the loop, never from inside a
  // write (a write that answers others does not recurse).
  std::set<int> touched;
  std::optional<Steady::time_point>
      accept_resume;                    // accept() paused (EMFILE, a full pool) until then
  bool accept_paused_for_pool = false;  // resumed as soon as a handshake ends
  Steady::time_point next_sweep;
  // Connections past the handshake (at most options.max_clients), and those
  // still in it (at most options.max_handshakes: a newer one replaces the
  // oldest), in accept order; entries of connections gone since are skipped.
  size_t authed_count = 0;
  size_t handshaking = 0;
  uint64_t next_serial = 0;
  std::deque<std::pair<int, uint64_t>> handshake_order;
  // Clients refused or cut off: the first few hosts are named once each, the
  // rest counted and summed up at most every 10 s.
  struct Refusals {
    std::set<std::string> named;
    size_t unnamed = 0;
    std::set<std::string> unnamed_hosts;  // bounded
    size_t evicted = 0;
    Steady::time_point summary_due;
  } refusals;
  // The named refusals for other threads (refused_hosts()): "HOST (why)".
  mutable std::mutex refused_mutex;
  std::vector<std::string> refused;

  void loop();
  void accept_all();
  void on_readable(int fd);
  void process(int fd);
  void handle(int fd, Conn& c, protocol::Request r);
  void hello(Conn& c, const protocol::Request& r);
  void authenticate(Conn& c, const protocol::Request& r);
  void deliver(std::vector<KvCore::Out> out);
  void flush_touched();
  void flush(int fd);
  void close_conn(int fd);
  void update_events(int fd);
  void error(Conn& c, uint32_t id, const std::string& message);
  void sweep(Steady::time_point now);
  void warn_peer(const Conn& c, const std::string& what);
  void summarise_refusals(Steady::time_point now, bool now_or_never = false);
  std::optional<Steady::time_point> evict_oldest_handshake(Steady::time_point cutoff);
  void pause_accept(Steady::time_point until, bool for_pool);
  bool admit(Conn& c, uint32_t id);
  void reset_conn(int fd);
};

}  // namespace ddplaunch
