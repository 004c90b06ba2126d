#include "output/status_page.hpp"

#include "embedded.hpp"

namespace ddplaunch {

std::string_view status_page_html() {
  return embedded::status_page();
}

std::string events_json(const std::deque<std::string>& lines) {
  std::string out = "[";
  for (const auto& line : lines) {
    if (out.size() > 1) {
      out += ",";
    }
    out.append(line, 0, line.empty() || line.back() != '\n' ? line.size() : line.size() - 1);
  }
  return out + "]";
}

}  // namespace ddplaunch
