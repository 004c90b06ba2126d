// `ddplaunch status`'s screen: the job, its nodes and its ranks as a
// table, from the document the command collected (docs/STATUS.md). Pure.
#pragma once

#include <string>

namespace ddplaunch {

// `doc` is the command's JSON document; lines are cut to `width` columns.
std::string format_status(const std::string& doc, int width);

}  // namespace ddplaunch
