// `ddplaunch status`'s screen: the job, its nodes and its ranks as a table,
// from the merged document (docs/STATUS.md). Lines are cut to `width`
// columns, a UTF-8 character kept whole. Pure.
#pragma once

#include <string>

#include "status/status_record.hpp"

namespace ddplaunch {

std::string format_status(const StatusDocument& doc, int width);

}  // namespace ddplaunch
