#include "env/env_map.hpp"

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

}  // namespace ddplaunch
