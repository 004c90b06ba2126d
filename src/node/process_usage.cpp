#include "node/process_usage.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <unordered_map>

#include "config/integer.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

std::optional<StatFields> parse_stat(std::string_view line) {
  const size_t close = line.rfind(')');
  if (close == std::string_view::npos || close + 2 >= line.size()) {
    return std::nullopt;
  }
  // Fields from the 3rd (state) on, space-separated.
  std::vector<std::string_view> f;
  for (size_t at = close + 2; at < line.size() && f.size() < 22;) {
    size_t end = line.find(' ', at);
    end = end == std::string_view::npos ? line.size() : end;
    f.push_back(line.substr(at, end - at));
    at = end + 1;
  }
  if (f.size() < 22 || f[0].empty()) {
    return std::nullopt;
  }
  StatFields s;
  s.state = f[0][0];
  const auto ppid = parse_integer(f[1]);
  const auto utime = parse_integer(f[11]);
  const auto stime = parse_integer(f[12]);
  const auto rss = parse_integer(f[21]);
  if (!ppid || !utime || !stime || !rss) {
    return std::nullopt;
  }
  s.ppid = static_cast<pid_t>(*ppid);
  s.ticks = *utime + *stime;
  s.rss_pages = *rss;
  return s;
}

std::vector<ProcessUsage> tree_usage(const std::vector<pid_t>& roots) {
  std::unordered_map<pid_t, StatFields> all;
  if (DIR* dir = opendir("/proc")) {
    while (dirent* ent = readdir(dir)) {
      const auto pid = parse_integer(ent->d_name);
      if (!pid) {
        continue;
      }
      const auto text = posix::read_small_file("/proc/" + std::string(ent->d_name) + "/stat");
      if (auto s = text ? parse_stat(*text) : std::nullopt) {
        all.emplace(static_cast<pid_t>(*pid), *s);
      }
    }
    closedir(dir);
  }
  std::unordered_map<pid_t, size_t> root_index;
  for (size_t i = 0; i < roots.size(); ++i) {
    root_index.emplace(roots[i], i);
  }
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const long long page_kib = sysconf(_SC_PAGESIZE) / 1024;
  std::vector<ProcessUsage> usage(roots.size());
  for (const auto& [pid, s] : all) {
    // The root this process descends from, if any (a bounded climb).
    pid_t at = pid;
    for (int depth = 0; depth < 64 && at > 1; ++depth) {
      if (auto r = root_index.find(at); r != root_index.end()) {
        ProcessUsage& u = usage[r->second];
        u.cpu_s += static_cast<double>(s.ticks) / tick;
        u.rss_kib += s.rss_pages * page_kib;
        ++u.processes;
        u.pids.push_back(pid);
        if (at == pid) {
          u.state = s.state;
        }
        break;
      }
      auto parent = all.find(at);
      at = parent == all.end() ? 0 : parent->second.ppid;
    }
  }
  for (size_t i = 0; i < usage.size(); ++i) {
    const pid_t root = roots[i];
    std::sort(usage[i].pids.begin(), usage[i].pids.end(),
              [root](pid_t a, pid_t b) { return (a == root) != (b == root) ? a == root : a < b; });
  }
  return usage;
}

}  // namespace ddplaunch
