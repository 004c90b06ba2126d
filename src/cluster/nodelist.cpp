#include "cluster/nodelist.hpp"

#include <charconv>
#include <limits>
#include <optional>
#include <utility>

#include "config/integer.hpp"
#include "config/launch_error.hpp"

namespace ddplaunch {

namespace {

constexpr size_t k_max_hosts = 1'000'000;

[[noreturn]] void bad(std::string_view list, const std::string& why) {
  throw UsageError("cannot read the Slurm node list '" + std::string(list) + "': " + why +
                   "; set --nnodes, --node-rank and --master-addr yourself");
}

std::optional<long long> number(std::string_view s) {
  return parse_integer_in(s, 0, std::numeric_limits<long long>::max());
}

// One item of a bracket group: numbers lo..hi, written `width` digits wide.
struct Range {
  long long lo = 0;
  long long hi = 0;
  size_t width = 0;
};

// "01-04,07" -> {{1, 4, 2}, {7, 7, 1}}; at most k_max_hosts numbers in all.
std::vector<Range> parse_ranges(std::string_view list, std::string_view inside) {
  std::vector<Range> out;
  size_t total = 0;
  while (true) {
    const auto comma = inside.find(',');
    const auto item = inside.substr(0, comma);
    const auto dash = item.find('-');
    const auto lo_text = item.substr(0, dash);
    const auto lo = number(lo_text);
    if (!lo) {
      bad(list, "'" + std::string(item) + "' is not a number or a range");
    }
    long long hi = *lo;
    if (dash != std::string_view::npos) {
      const auto h = number(item.substr(dash + 1));
      if (!h || *h < *lo) {
        bad(list, "'" + std::string(item) + "' is not a range from low to high");
      }
      hi = *h;
    }
    if (static_cast<size_t>(hi - *lo) + total >= k_max_hosts) {
      bad(list, "it names more than a million hosts");
    }
    total += static_cast<size_t>(hi - *lo) + 1;
    out.push_back(Range{*lo, hi, lo_text.size()});
    if (comma == std::string_view::npos) {
      return out;
    }
    inside.remove_prefix(comma + 1);
  }
}

size_t count_of(const std::vector<Range>& ranges) {
  size_t n = 0;
  for (const auto& r : ranges) {
    n += static_cast<size_t>(r.hi - r.lo) + 1;
  }
  return n;
}

// "01-04,07" -> {"01", "02", "03", "04", "07"}, keeping the width of each range.
std::vector<std::string> expand_ranges(const std::vector<Range>& ranges) {
  std::vector<std::string> out;
  for (const auto& r : ranges) {
    for (long long v = r.lo; v <= r.hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < r.width) {
        s.insert(0, r.width - s.size(), '0');
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

// One host expression (no top-level comma): "rack[1-2]-n[01-02]". Its
// names are counted into `counted`, and built into `out` unless it is null.
void expand_one(std::string_view list, std::string_view expr, std::vector<std::string>* out,
                size_t& counted) {
  if (expr.empty()) {
    bad(list, "an empty host name");
  }
  size_t count = 1;
  std::vector<std::string> names = {""};
  while (!expr.empty()) {
    const auto open = expr.find('[');
    const auto text = expr.substr(0, open);
    if (text.find(']') != std::string_view::npos) {
      bad(list, "a ']' without its '['");
    }
    if (out != nullptr) {
      for (auto& n : names) {
        n += text;
      }
    }
    if (open == std::string_view::npos) {
      break;
    }
    const auto close = expr.find(']', open);
    if (close == std::string_view::npos) {
      bad(list, "a '[' without its ']'");
    }
    const auto ranges = parse_ranges(list, expr.substr(open + 1, close - open - 1));
    // Checked before the product is built: two groups of 300,000 would be 9e10 names.
    const size_t parts = count_of(ranges);
    if (parts > (k_max_hosts - counted) / count) {
      bad(list, "it names more than a million hosts");
    }
    count *= parts;
    if (out != nullptr) {
      const auto numbers = expand_ranges(ranges);
      std::vector<std::string> next;
      next.reserve(names.size() * numbers.size());
      for (const auto& n : names) {
        for (const auto& p : numbers) {
          next.push_back(n + p);
        }
      }
      names = std::move(next);
    }
    expr.remove_prefix(close + 1);
  }
  if (count > k_max_hosts - counted) {
    bad(list, "it names more than a million hosts");
  }
  counted += count;
  if (out != nullptr) {
    for (auto& n : names) {
      out->push_back(std::move(n));
    }
  }
}

// Walks the top-level expressions of `list`, expanding (into `out`) or
// counting them.
size_t walk_nodelist(std::string_view list, std::vector<std::string>* out) {
  size_t counted = 0;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') {
      ++depth;
    } else if (i < list.size() && list[i] == ']') {
      --depth;
    }
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      expand_one(list, list.substr(start, i - start), out, counted);
      start = i + 1;
    }
  }
  if (depth != 0) {
    bad(list, "unbalanced brackets");
  }
  return counted;
}

}  // namespace

std::vector<std::string> expand_nodelist(std::string_view list) {
  std::vector<std::string> out;
  walk_nodelist(list, &out);
  return out;
}

size_t count_nodelist(std::string_view list) {
  return walk_nodelist(list, nullptr);
}

namespace {

// "gpu-017" -> {"gpu-", "017"}; no trailing digits: {name, ""}.
std::pair<std::string_view, std::string_view> split_number(std::string_view name) {
  size_t i = name.size();
  while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') {
    --i;
  }
  // At most 18 digits: the value must fit a long long.
  if (name.size() - i > 18) {
    i = name.size();
  }
  return {name.substr(0, i), name.substr(i)};
}

// The bracket group's items for the numbers `digits` (one prefix): runs of
// +1 folded into "lo-hi" where expand_ranges() pads them back alike.
std::string fold_numbers(const std::vector<std::string_view>& digits) {
  std::string out;
  size_t i = 0;
  while (i < digits.size()) {
    const std::string_view lo = digits[i];
    const long long first = *number(lo);
    size_t j = i + 1;
    while (j < digits.size()) {
      std::string want = std::to_string(first + static_cast<long long>(j - i));
      if (want.size() < lo.size()) {
        want.insert(0, lo.size() - want.size(), '0');
      }
      if (want != digits[j]) {
        break;
      }
      ++j;
    }
    if (!out.empty()) {
      out += ',';
    }
    out += lo;
    if (j - i > 1) {
      out += '-';
      out += digits[j - 1];
    }
    i = j;
  }
  return out;
}

}  // namespace

std::string compress_nodelist(const std::vector<std::string>& hosts) {
  for (const auto& h : hosts) {
    if (h.empty() || h.find_first_of("[],") != std::string::npos) {
      return "";
    }
  }
  std::string out;
  size_t i = 0;
  while (i < hosts.size()) {
    const auto [prefix, digits] = split_number(hosts[i]);
    std::vector<std::string_view> group = {digits};
    size_t j = i + 1;
    while (!digits.empty() && j < hosts.size()) {
      const auto [p, d] = split_number(hosts[j]);
      if (p != prefix || d.empty()) {
        break;
      }
      group.push_back(d);
      ++j;
    }
    if (!out.empty()) {
      out += ',';
    }
    if (group.size() == 1) {
      out += hosts[i];
    } else {
      out += prefix;
      out += '[';
      out += fold_numbers(group);
      out += ']';
    }
    i = j;
  }
  return out;
}

std::vector<int> expand_tasks_per_node(std::string_view value) {
  std::vector<int> out;
  while (!value.empty()) {
    const auto comma = value.find(',');
    auto item = value.substr(0, comma);
    long long repeat = 1;
    if (const auto paren = item.find("(x"); paren != std::string_view::npos) {
      auto r = item.back() == ')' ? number(item.substr(paren + 2, item.size() - paren - 3))
                                  : std::nullopt;
      if (!r) {
        throw UsageError("cannot read Slurm's tasks per node '" + std::string(value) + "'");
      }
      repeat = *r;
      item = item.substr(0, paren);
    }
    const auto n = number(item);
    if (!n || repeat > static_cast<long long>(k_max_hosts) || out.size() + repeat > k_max_hosts) {
      throw UsageError("cannot read Slurm's tasks per node '" + std::string(value) + "'");
    }
    out.insert(out.end(), static_cast<size_t>(repeat), static_cast<int>(*n));
    if (comma == std::string_view::npos) {
      break;
    }
    value.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace ddplaunch
