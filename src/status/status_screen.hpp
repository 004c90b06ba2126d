// `ddplaunch status`'s screen: the job, its nodes and its ranks as a table,
// from the merged document (docs/STATUS.md); lines are cut to `width`
// columns, a UTF-8 character kept whole. `ddplaunch stacks`' text: every
// rank's processes and their stacks, in rank order, control characters
// shown as '?'. Pure.
#pragma once

#include <string>

#include "status/stacks_record.hpp"
#include "status/status_record.hpp"

namespace ddplaunch {

std::string format_status(const StatusDocument& doc, int width);
std::string format_stacks(const StacksDocument& doc);

}  // namespace ddplaunch
