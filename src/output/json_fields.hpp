// The two habits every JSON document ddplaunch writes and reads shares (the
// store's records, the summary, the error files): text that is always
// written (invalid UTF-8 becomes U+FFFD), and integer fields read strictly.
// Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ddplaunch {

// `j` as text (`indent` < 0: one line); never throws on invalid UTF-8.
std::string json_text(const nlohmann::json& j, int indent = -1);

// An integer field within int's range; anything else (4e19, which nlohmann
// would convert with undefined behaviour, "3", 2^40) throws RecordError.
int json_int(const nlohmann::json& j);

}  // namespace ddplaunch
