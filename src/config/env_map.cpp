#include "config/env_map.hpp"

#include <stdexcept>
#include <string_view>

namespace ddplaunch {

EnvMap capture_environment(char** envp) {
  EnvMap env;
  for (char** p = envp; p != nullptr && *p != nullptr; ++p) {
    std::string_view entry(*p);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      continue;
    }
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

WorkerEnv::WorkerEnv(std::shared_ptr<const EnvMap> inherited, const EnvMap& full)
    : m_inherited(std::move(inherited)) {
  // Both maps are sorted by name: one merge, no lookups (it runs once per
  // worker on the launch path).
  auto a = full.begin();
  auto b = m_inherited->begin();
  while (a != full.end() || b != m_inherited->end()) {
    if (b == m_inherited->end() || (a != full.end() && a->first < b->first)) {
      m_own.emplace_hint(m_own.end(), a->first, a->second);  // new to this worker
      ++a;
    } else if (a == full.end() || b->first < a->first) {
      m_removed.push_back(b->first);  // in order: the map is sorted
      ++b;
    } else {
      if (a->second != b->second) {
        m_own.emplace_hint(m_own.end(), a->first, a->second);
      }
      ++a;
      ++b;
    }
  }
}

EnvMap WorkerEnv::full() const {
  EnvMap out = m_own;
  for (const auto& [name, value] : *m_inherited) {
    if (!removed(name)) {
      out.emplace(name, value);  // no-op where this worker has its own value
    }
  }
  return out;
}

bool WorkerEnv::contains(const std::string& name) const {
  return m_own.contains(name) || (m_inherited->contains(name) && !removed(name));
}

const std::string& WorkerEnv::at(const std::string& name) const {
  if (auto it = m_own.find(name); it != m_own.end()) {
    return it->second;
  }
  if (removed(name)) {
    throw std::out_of_range("WorkerEnv: " + name);
  }
  return m_inherited->at(name);
}

void WorkerEnv::set(const std::string& name, std::string value) {
  m_own[name] = std::move(value);
}

void WorkerEnv::erase(const std::string& name) {
  m_own.erase(name);
  if (m_inherited->contains(name) && !removed(name)) {
    m_removed.insert(std::upper_bound(m_removed.begin(), m_removed.end(), name), name);
  }
}

void apply_env_exports(const std::vector<std::string>& exports, EnvMap& env) {
  for (const auto& item : exports) {
    if (const size_t eq = item.find('='); eq != std::string::npos) {
      env[item.substr(0, eq)] = item.substr(eq + 1);
    }
  }
}

}  // namespace ddplaunch
