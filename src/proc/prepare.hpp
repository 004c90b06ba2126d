// A worker's exec, prepared in the parent before the child starts (the
// child allocates nothing): the program found on the worker's own PATH, argv
// and envp as C arrays, the CPU affinity to set. Private to proc/spawn; not
// thread-safe (each spawning thread has its own ProgramCache).
#pragma once

#include <sched.h>

#include <optional>
#include <string>
#include <vector>

#include "env/launch_spec.hpp"

namespace ddplaunch {

// What execve() and sched_setaffinity() are handed.
struct Prepared {
  std::string path;
  std::string env_text;  // every "NAME=value\0", one after the other
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<cpu_set_t> cpus;  // the affinity to set before exec; empty: inherited
};

// find_program(), remembered: the workers of a node mostly run one program
// with one PATH, so it is looked up once, not once per worker.
class ProgramCache {
 public:
  std::optional<std::string> find(const std::string& program, const WorkerEnv& env);

 private:
  std::string m_program, m_path;
  std::optional<std::optional<std::string>> m_found;
};

// Throws SpawnError when the program is not found.
Prepared prepare(const WorkerSpec& spec, ProgramCache& programs);

}  // namespace ddplaunch
