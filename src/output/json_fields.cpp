#include "output/json_fields.hpp"

#include <cstdint>

#include "output/report_json.hpp"

namespace ddplaunch {

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

int json_int(const nlohmann::json& j) {
  if (j.is_number_integer() && !j.is_number_unsigned() && j.get<int64_t>() >= INT32_MIN &&
      j.get<int64_t>() <= INT32_MAX) {
    return static_cast<int>(j.get<int64_t>());
  }
  if (j.is_number_unsigned() && j.get<uint64_t>() <= INT32_MAX) {
    return static_cast<int>(j.get<uint64_t>());
  }
  throw RecordError("malformed record: " + j.dump().substr(0, 40) + " is not an integer in range");
}

}  // namespace ddplaunch
