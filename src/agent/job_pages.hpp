// --metrics-port's routes on the process's loop: every node's /metrics, and
// on node 0 (once rendezvous named it) the live page, /status.json and
// /events.json (docs/METRICS.md).
#pragma once

#include <memory>

#include "agent/metrics_http.hpp"
#include "agent/status_room.hpp"
#include "config/config.hpp"
#include "output/event_log.hpp"
#include "posix/event_loop.hpp"
#include "rendezvous/status_collector.hpp"

namespace ddplaunch {

// nullptr without --metrics-port. `collector`: node 0's own status request
// (nullptr for a one-node job, whose answer is its own room's). Throws
// UsageError (exit 2) where it cannot listen.
std::unique_ptr<MetricsServer> serve_job_pages(const Config& config, const RoundView& view,
                                               const StatusRoom& status, posix::EventLoop& loop,
                                               StatusCollector* collector, EventLog* events);

}  // namespace ddplaunch
