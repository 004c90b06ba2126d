// The network preflight (--preflight): before a multi-node job's first
// workers start, every node connects to the nodes it is given (their probe
// listeners, on the address gloo and NCCL will use) and to node 0's
// MASTER_PORT, so that a blocked path is one line naming both nodes, the
// address and the port, not a gloo or NCCL hang. Which nodes probe whom is
// pure (this file); the connects are a NetworkProbe, which the agent's own
// loop drives (agent/reach_probe.hpp) and the tests fake.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddplaunch {

// Every other node, up to this many nodes (all-to-all); beyond it a bounded
// sample: the 16 next node ranks and those 32, 64, 128, ... further on.
inline constexpr int k_preflight_all_to_all = 17;
// At most about this many nodes probe node 0's MASTER_PORT (its listen
// backlog holds them all).
inline constexpr int k_preflight_master_probers = 1024;

// The node ranks `node_rank` probes in a job of `nnodes` (each also is
// probed by as many: the sample is circulant), in increasing distance.
std::vector<int> preflight_peers(int node_rank, int nnodes);
// Whether `node_rank` probes node 0's MASTER_PORT.
bool probes_master_port(int node_rank, int nnodes);

// One connect to make: node `node` (`host`) at addr:port.
struct ProbeTarget {
  int node = -1;
  std::string host;
  std::string addr;
  int port = 0;
  bool master_port = false;  // node 0's MASTER_PORT; else the node's probe port
  bool operator==(const ProbeTarget&) const = default;
};

// A connect that failed: why, in words ("connection refused", "no answer
// within 5 s").
struct ProbeFailure {
  ProbeTarget target;
  std::string error;
  bool operator==(const ProbeFailure&) const = default;
};

// The one line a blocked path becomes: "node 1 (b) cannot reach node 2 (c)
// at 10.0.0.3:41234 (its probe port, on the address gloo and NCCL use):
// connection refused".
std::string describe_blocked(int from_node, const std::string& from_host,
                             const ProbeFailure& failure);

// A node's probe listener, as node 0 publishes it for the others
// (rdzv/probe/<node rank>); port 0: the node has none (--no-preflight there).
// Node 0's also says whether its MASTER_PORT is held open for the probes.
struct ProbeEndpoint {
  std::string host;
  std::string addr;
  int port = 0;
  int master_port = 0;  // node 0's, held open while the others probe it; 0: not
  bool operator==(const ProbeEndpoint&) const = default;
};

// Makes the connects, from the owner's event loop: start() returns at once,
// the owner watches fd() (readable when a connect ended) and calls
// on_ready(), and calls on_time() by deadline(); `done` is called once,
// from one of those, with the failures. Not thread-safe.
class NetworkProbe {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Done = std::function<void(std::vector<ProbeFailure>)>;
  virtual ~NetworkProbe() = default;

  // Listens on every address at `port` until release(): node 0's
  // MASTER_PORT while the other nodes probe it, before its rank 0 binds
  // it. False (nothing held) when the port cannot be bound.
  virtual bool hold_port(int port) = 0;
  // Closes what hold_port() held and this node's own probe listener: the
  // preflight is over.
  virtual void release() = 0;
  virtual void start(std::vector<ProbeTarget> targets, TimePoint deadline, Done done) = 0;
  // -1 when nothing is in flight.
  virtual int fd() const = 0;
  virtual void on_ready(TimePoint now) = 0;
  virtual std::optional<TimePoint> deadline() const = 0;
  virtual void on_time(TimePoint now) = 0;
};

}  // namespace ddplaunch
