#include "output/lines.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace ddplaunch {

LinePrefix::LinePrefix(std::string_view tmpl, const Fields& fields) {
  m_parts.emplace_back();
  size_t pos = 0;
  while (pos < tmpl.size()) {
    if (tmpl[pos] != '{') {
      m_parts.back().push_back(tmpl[pos++]);
      continue;
    }
    size_t close = tmpl.find('}', pos);
    if (close == std::string_view::npos) {
      m_parts.back().append(tmpl.substr(pos));
      break;
    }
    std::string_view name = tmpl.substr(pos + 1, close - pos - 1);
    if (name == "rank") {
      m_parts.back() += std::to_string(fields.rank);
    } else if (name == "local_rank") {
      m_parts.back() += std::to_string(fields.local_rank);
    } else if (name == "node_rank") {
      m_parts.back() += std::to_string(fields.node_rank);
    } else if (name == "host") {
      m_parts.back() += fields.host;
    } else if (name == "time") {
      m_parts.emplace_back();  // a time field separates two fixed parts
    } else {
      m_parts.back().append(tmpl.substr(pos, close - pos + 1));
    }
    pos = close + 1;
  }
}

void LinePrefix::append_to(std::string& out, std::time_t now) const {
  out += m_parts[0];
  if (m_parts.size() == 1) {
    return;
  }
  std::tm tm_now = {};
  localtime_r(&now, &tm_now);
  char buf[16];
  size_t n = std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm_now);
  for (size_t i = 1; i < m_parts.size(); ++i) {
    out.append(buf, n);
    out += m_parts[i];
  }
}

void TailBuffer::push(std::string_view line) {
  if (m_max_lines == 0) {
    return;
  }
  line = line.substr(0, m_max_line_bytes);
  if (m_ring.size() < m_max_lines) {
    m_ring.emplace_back(line);
    return;
  }
  // Reuse the oldest line's storage: no allocation per line of a stderr flood.
  m_ring[m_next].assign(line);
  m_next = (m_next + 1) % m_max_lines;
}

std::vector<std::string> TailBuffer::lines() const {
  std::vector<std::string> out;
  out.reserve(m_ring.size());
  for (size_t i = 0; i < m_ring.size(); ++i) {
    out.push_back(m_ring[(m_next + i) % m_ring.size()]);
  }
  return out;
}

}  // namespace ddplaunch
