// EnvMap: a process environment as a plain value, ordered by name so output
// is deterministic. Pure: capture_environment only copies the array it gets.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ddplaunch {

using EnvMap = std::map<std::string, std::string>;

// The value of `name` in `env`, or nullptr when it is unset or empty.
inline const std::string* env_value(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// Copies a NULL-terminated "NAME=value" array (such as environ).
EnvMap capture_environment(char** envp);

// mpirun's -x: each "VAR=value" of `exports` set in `env` (a plain "VAR"
// names one `env` already has).
void apply_env_exports(const std::vector<std::string>& exports, EnvMap& env);

// A worker's environment: the inherited one, shared by every worker of a
// plan, with this worker's own values over it and some inherited names
// removed. A few hundred bytes per worker where a full copy costs kilobytes
// (4,096 workers on one node).
class WorkerEnv {
 public:
  WorkerEnv() : m_inherited(std::make_shared<const EnvMap>()) {}
  // Keeps only how `full` differs from `inherited`.
  WorkerEnv(std::shared_ptr<const EnvMap> inherited, const EnvMap& full);

  EnvMap full() const;
  // Calls fn(name, value) for every variable the worker gets, without
  // building full() (the spawn path's: one call per variable, no copies).
  template <typename F>
  void for_each(F&& fn) const {
    // Both maps and the removed names are sorted: one merge, no lookups.
    auto own = m_own.begin();
    auto removed = m_removed.begin();
    for (const auto& [name, value] : *m_inherited) {
      for (; own != m_own.end() && own->first < name; ++own) {
        fn(own->first, own->second);
      }
      if (own != m_own.end() && own->first == name) {
        fn(own->first, own->second);  // this worker's own value
        ++own;
        continue;
      }
      while (removed != m_removed.end() && *removed < name) {
        ++removed;
      }
      if (removed != m_removed.end() && *removed == name) {
        continue;
      }
      fn(name, value);
    }
    for (; own != m_own.end(); ++own) {
      fn(own->first, own->second);
    }
  }
  bool contains(const std::string& name) const;
  // Throws std::out_of_range for a name the worker does not get.
  const std::string& at(const std::string& name) const;
  void set(const std::string& name, std::string value);
  void erase(const std::string& name);

 private:
  bool removed(const std::string& name) const {
    return std::binary_search(m_removed.begin(), m_removed.end(), name);
  }
  std::shared_ptr<const EnvMap> m_inherited;
  EnvMap m_own;
  std::vector<std::string> m_removed;  // sorted
};

}  // namespace ddplaunch
