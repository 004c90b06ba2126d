#include "proc/prepare.hpp"

#include <unistd.h>

#include <algorithm>

#include "proc/spawn.hpp"

namespace ddplaunch {

namespace {

// The PATH a worker's program is looked up in (execvp's default without one).
std::string path_of(const WorkerEnv& env) {
  return env.contains("PATH") ? env.at("PATH") : "/usr/local/bin:/usr/bin:/bin";
}

}  // namespace

std::optional<std::string> ProgramCache::find(const std::string& program, const WorkerEnv& env) {
  std::string path = path_of(env);
  if (!m_found || program != m_program || path != m_path) {
    m_program = program;
    m_path = std::move(path);
    m_found = find_program(program, EnvMap{{"PATH", m_path}});
  }
  return *m_found;
}

Prepared prepare(const WorkerSpec& spec, ProgramCache& programs) {
  Prepared p;
  auto path = programs.find(spec.argv.at(0), spec.env);
  if (!path) {
    throw SpawnError("cannot execute '" + spec.argv[0] +
                     "': not found (no such file, or not in PATH); check the program name");
  }
  p.path = *path;
  // One buffer for the whole environment: one allocation per worker, not
  // one per variable.
  size_t env_bytes = 0, count = 0;
  spec.env.for_each([&](const std::string& k, const std::string& v) {
    env_bytes += k.size() + v.size() + 2;
    ++count;
  });
  p.env_text.reserve(env_bytes);
  spec.env.for_each([&p](const std::string& k, const std::string& v) {
    p.env_text.append(k).append(1, '=').append(v).append(1, '\0');
  });
  for (const auto& a : spec.argv) {
    p.argv.push_back(const_cast<char*>(a.c_str()));
  }
  p.argv.push_back(nullptr);
  p.envp.reserve(count + 1);
  for (size_t at = 0; at < p.env_text.size(); at = p.env_text.find('\0', at) + 1) {
    p.envp.push_back(p.env_text.data() + at);
  }
  p.envp.push_back(nullptr);
  if (!spec.cpus.empty()) {
    const int highest = *std::max_element(spec.cpus.begin(), spec.cpus.end());
    p.cpus.resize(static_cast<size_t>(highest) / CPU_SETSIZE + 1);
    for (auto& set : p.cpus) {
      CPU_ZERO(&set);
    }
    const size_t bytes = p.cpus.size() * sizeof(cpu_set_t);
    for (int c : spec.cpus) {
      CPU_SET_S(static_cast<size_t>(c), bytes, p.cpus.data());
    }
  }
  return p;
}

std::optional<std::string> find_program(const std::string& program, const EnvMap& env) {
  if (program.empty()) {
    return std::nullopt;
  }
  if (program.find('/') != std::string::npos) {
    return access(program.c_str(), F_OK) == 0 ? std::optional(program) : std::nullopt;
  }
  auto it = env.find("PATH");
  std::string path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  std::optional<std::string> first_existing;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) {
      end = path.size();
    }
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (!first_existing && access(candidate.c_str(), F_OK) == 0) {
      first_existing = candidate;  // exists but not executable: exec reports EACCES
    }
    start = end + 1;
  }
  return first_existing;
}

}  // namespace ddplaunch
