#include "env/tf_env.hpp"

#include <nlohmann/json.hpp>

namespace ddplaunch {

std::string tf_config(const JobLayout& layout, int local_rank) {
  if (layout.worker_endpoints.empty()) {
    return "";
  }
  nlohmann::json doc = {{"cluster", {{"worker", layout.worker_endpoints}}},
                        {"task", {{"type", "worker"}, {"index", layout.rank_offset + local_rank}}}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ddplaunch
