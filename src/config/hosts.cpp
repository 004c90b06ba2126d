#include "config/hosts.hpp"

#include <algorithm>
#include <charconv>

#include "config/integer.hpp"
#include "config/launch_error.hpp"

namespace ddplaunch {

namespace {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) {
    return {};
  }
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// A host name or address as a list may spell it: letters, digits, '-', '.',
// '_' and, for IPv6, ':' inside brackets. The resolver judges the rest.
bool host_chars_ok(std::string_view host) {
  if (host.empty() || host.size() > 253 || host.front() == '-') {
    return false;
  }
  for (const char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_';
    if (!ok) {
      return false;
    }
  }
  return true;
}

std::optional<int> slots_of(std::string_view text) {
  const auto n = parse_integer_in(text, 1, k_max_slots);
  return n ? std::optional<int>(static_cast<int>(*n)) : std::nullopt;
}

// Adds `entry` to `hosts`, a host named again getting the slots added.
void add(std::vector<HostSlots>& hosts, HostSlots entry) {
  for (auto& h : hosts) {
    if (h.host == entry.host) {
      h.slots = std::min(k_max_slots, h.slots.value_or(1) + entry.slots.value_or(1));
      return;
    }
  }
  hosts.push_back(std::move(entry));
}

}  // namespace

std::vector<HostSlots> parse_host_list(std::string_view list, std::string_view flag) {
  std::vector<HostSlots> hosts;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    comma = comma == std::string_view::npos ? list.size() : comma;
    const std::string_view item = trim(list.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) {
      continue;
    }
    HostSlots entry;
    const size_t colon = item.rfind(':');
    entry.host = std::string(item.substr(0, colon));
    if (colon != std::string_view::npos) {
      entry.slots = slots_of(item.substr(colon + 1));
      if (!entry.slots) {
        throw UsageError(std::string(flag) + ": '" + std::string(item) +
                         "' has no valid slot count after ':'; write HOST or HOST:N with N from 1 "
                         "to " +
                         std::to_string(k_max_slots));
      }
    }
    if (!host_chars_ok(entry.host)) {
      throw UsageError(std::string(flag) + ": '" + entry.host +
                       "' is not a host name or IPv4 address; write HOST[:N],HOST[:N],...");
    }
    add(hosts, std::move(entry));
  }
  if (hosts.empty()) {
    throw UsageError(std::string(flag) + " names no host; write HOST[:N],HOST[:N],...");
  }
  return hosts;
}

std::vector<HostSlots> parse_hostfile(std::string_view text, std::string_view path) {
  std::vector<HostSlots> hosts;
  size_t line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end;
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) {
      continue;
    }
    const auto where = [&] { return std::string(path) + " line " + std::to_string(line_no); };
    const size_t space = line.find_first_of(" \t");
    std::string_view name = line.substr(0, space);
    HostSlots entry;
    if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) {
      entry.slots = slots_of(name.substr(colon + 1));
      if (!entry.slots) {
        throw UsageError(where() + ": '" + std::string(name) +
                         "' has no valid slot count after ':' (1 to " +
                         std::to_string(k_max_slots) + ")");
      }
      name = name.substr(0, colon);
    }
    entry.host = std::string(name);
    if (!host_chars_ok(entry.host)) {
      throw UsageError(where() + ": '" + entry.host +
                       "' is not a host name or IPv4 address; write 'HOST slots=N'");
    }
    std::string_view rest = space == std::string_view::npos ? "" : trim(line.substr(space));
    while (!rest.empty()) {
      const size_t next = rest.find_first_of(" \t");
      const std::string_view word = rest.substr(0, next);
      rest = next == std::string_view::npos ? "" : trim(rest.substr(next));
      const size_t eq = word.find('=');
      const std::string_view key = word.substr(0, eq);
      const std::string_view value = eq == std::string_view::npos ? "" : word.substr(eq + 1);
      if (key == "slots" || key == "max_slots" || key == "max-slots") {
        const auto n = slots_of(value);
        if (!n) {
          throw UsageError(where() + ": '" + std::string(word) + "' needs a count from 1 to " +
                           std::to_string(k_max_slots));
        }
        if (key == "slots") {
          entry.slots = n;
        }
        continue;
      }
      throw UsageError(where() + ": unknown '" + std::string(word) +
                       "'; a line is 'HOST slots=N' (mpirun's and DeepSpeed's format)");
    }
    add(hosts, std::move(entry));
  }
  if (hosts.empty()) {
    throw UsageError(std::string(path) + " names no host; write one 'HOST slots=N' a line");
  }
  return hosts;
}

}  // namespace ddplaunch
