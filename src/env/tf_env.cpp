#include "env/tf_env.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

namespace ddplaunch {

std::string tf_config(const JobLayout& layout, int local_rank, const TfRoles& roles) {
  const auto& all = layout.worker_endpoints;
  if (all.empty()) {
    return "";
  }
  const size_t chiefs = roles.chief ? 1 : 0;
  const size_t ps = std::min(all.size() - chiefs, static_cast<size_t>(std::max(roles.ps, 0)));
  nlohmann::json cluster = nlohmann::json::object();
  if (chiefs != 0) {
    cluster["chief"] = {all.front()};
  }
  if (ps != 0) {
    cluster["ps"] = std::vector<std::string>(all.begin() + static_cast<long>(chiefs),
                                             all.begin() + static_cast<long>(chiefs + ps));
  }
  if (all.size() > chiefs + ps) {
    cluster["worker"] =
        std::vector<std::string>(all.begin() + static_cast<long>(chiefs + ps), all.end());
  }
  const auto rank = static_cast<size_t>(layout.rank_offset + local_rank);
  nlohmann::json task;
  if (rank < chiefs) {
    task = {{"type", "chief"}, {"index", 0}};
  } else if (rank < chiefs + ps) {
    task = {{"type", "ps"}, {"index", rank - chiefs}};
  } else {
    task = {{"type", "worker"}, {"index", rank - chiefs - ps}};
  }
  nlohmann::json doc = {{"cluster", cluster}, {"task", task}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ddplaunch
