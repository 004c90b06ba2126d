// /metrics's body: one node's status record (the one `ddplaunch status`
// reads) in the OpenMetrics text format, each metric listed in
// docs/METRICS.md; node 0's record adds the job's. Pure.
#pragma once

#include <string>

#include "status/status_record.hpp"

namespace ddplaunch {

inline constexpr const char* k_openmetrics_type =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

std::string openmetrics_text(const NodeStatus& node);

}  // namespace ddplaunch
