// StatusCollector: node 0's own `ddplaunch status` request, made on the
// agent's loop for --metrics-port's live page: the same keys as the command
// (status_responder.hpp), asked over node 0's store connection without
// blocking. refresh() starts a request unless one is in flight or the last
// is fresh; each node has `timeout` to answer; last() is the newest
// complete document (status_codec.hpp's, as /status.json serves it).
// Not thread-safe: the agent's loop drives the connection.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "posix/clock.hpp"
#include "status/status_record.hpp"
#include "store/connection.hpp"

namespace ddplaunch {

class StatusCollector {
 public:
  using Duration = std::chrono::milliseconds;
  // `nnodes` says how many nodes the running round has.
  StatusCollector(StoreConnection& store, const Clock& clock, std::function<int()> nnodes,
                  Duration fresh = Duration(1000), Duration timeout = Duration(2000));
  void refresh();
  const std::string& last() const { return m_last; }
  bool in_flight() const { return m_in_flight; }

 private:
  void collect(int64_t n, int nnodes);
  void collect_through_tree(int64_t n, int nnodes, int fanout, std::optional<NodeStatus> node0);
  void done(int64_t n, const StatusDocument& doc, const std::vector<std::string>& keys);

  StoreConnection& m_store;
  const Clock& m_clock;
  std::function<int()> m_nnodes;
  Duration m_fresh;
  Duration m_timeout;
  bool m_in_flight = false;
  std::optional<Clock::TimePoint> m_last_at;
  std::string m_last;
};

}  // namespace ddplaunch
