// The environment a PMIx server gives its clients (PMIx_server_setup_fork),
// kept between launches so that the next launch can start its workers
// before its server: ddplaunch starts libpmix only once a worker connects
// (mpi/pmix_relay.hpp), and a job whose workers never call MPI_Init never
// loads it. What setup_fork returns depends on the library, the host and the
// PMIX_MCA_* settings, and on a few names each run makes (the server's
// address, the round's namespace, the server's directory and process id):
// those are kept as placeholders, filled in for each run. Pure but for the
// cache file's reading and writing.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/env_map.hpp"
#include "mpi/mpi_host.hpp"

namespace ddplaunch {

// What one run names for itself in setup_fork's environment.
struct PmixRunNames {
  std::string uri;     // the server's rendezvous URI: the value of PMIX_SERVER_URI*
  std::string nspace;  // the round's namespace
  std::string tmpdir;  // the server's directory (this node's job directory)
  std::string pid;     // the server's process id
};

// `env` (setup_fork's, without the rank's variable PMIX_RANK) with the run's
// names made placeholders; nullopt when it cannot be reused by another run
// (a newline, a placeholder's own spelling in a value).
std::optional<EnvVars> pmix_env_template(const EnvVars& env, const PmixRunNames& run);

// The template filled in with `run`'s names.
EnvVars pmix_env_for_run(const EnvVars& tmpl, const PmixRunNames& run);

// What the environment depends on besides the library itself: the host
// name, the PMIX_MCA_* settings and the dynamic loader's (LD_LIBRARY_PATH,
// LD_PRELOAD), as one line.
std::string pmix_env_fingerprint(const EnvMap& env);

// This user's cache: temp_dir()/ddplaunch-pmix-<euid>.env.
std::string pmix_env_cache_path();

// The template kept for `fingerprint` in `path`, when the library it was
// written with is still the same file (its path, size, inode and mtime).
std::optional<EnvVars> read_pmix_env_cache(const std::string& path, const std::string& fingerprint);

// Keeps `tmpl` for `fingerprint`, written with the library at `library`.
bool write_pmix_env_cache(const std::string& path, const std::string& fingerprint,
                          const std::string& library, const EnvVars& tmpl);

// Whether a launch may start its workers before its PMIx server
// (DDPLAUNCH_PMIX_LAZY=0 starts the server first, as before).
bool pmix_lazy_enabled(const EnvMap& env);

}  // namespace ddplaunch
