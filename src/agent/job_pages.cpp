#include "agent/job_pages.hpp"

#include <optional>
#include <string_view>

#include "log.hpp"
#include "output/status_page.hpp"
#include "status/metrics_text.hpp"
#include "status/status_codec.hpp"

namespace ddplaunch {

std::unique_ptr<MetricsServer> serve_job_pages(const Config& config, const RoundView& view,
                                               const StatusRoom& status, posix::EventLoop& loop,
                                               StatusCollector* collector, EventLog* events) {
  if (config.metrics_port == 0) {
    return nullptr;
  }
  auto server = MetricsServer::start(
      config.metrics_bind, config.metrics_port,
      [&view, &status, collector, events](std::string_view path) -> MetricsServer::Response {
        constexpr const char* k_json = "application/json";
        if (path == "/metrics") {
          return {200, k_openmetrics_type,
                  openmetrics_text(status.answer({}).value_or(NodeStatus()))};
        }
        // Node 0 once rendezvous says so (an agent that does not know its
        // rank yet serves /metrics only).
        const bool node_0 = view.round().node_rank == 0;
        if (node_0 && path == "/") {
          return {200, "text/html; charset=utf-8", std::string(status_page_html())};
        }
        if (node_0 && path == "/status.json") {
          if (collector == nullptr) {  // one node: its own answer is the job's
            return {
                200, k_json,
                encode_status_document(merge_status(0, {0}, {status.answer({})}, std::nullopt))};
          }
          collector->refresh();
          return collector->last().empty()
                     ? MetricsServer::Response{503, k_json, "{\"collecting\":true}"}
                     : MetricsServer::Response{200, k_json, collector->last()};
        }
        if (node_0 && path == "/events.json") {
          return {200, k_json, events_json(events->recent())};
        }
        return {404, "text/plain; charset=utf-8",
                "not found: each node serves /metrics; node 0 also /, /status.json and "
                "/events.json\n"};
      });
  server->attach(loop);
  log::debug("serving OpenMetrics at http://{}:{}/metrics", config.metrics_bind,
             config.metrics_port);
  return server;
}

}  // namespace ddplaunch
