#include "mpi/pmix_env_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <vector>

#include "posix/cache_file.hpp"
#include "posix/fd.hpp"

namespace ddplaunch {

namespace {

constexpr std::string_view k_env_cache_magic = "ddplaunch-pmix-env 1 ";
constexpr size_t k_max_env_cache_bytes = 64u << 10;
constexpr std::string_view k_uri = "@@URI@@";
constexpr std::string_view k_nspace = "@@NSPACE@@";
constexpr std::string_view k_tmpdir = "@@TMPDIR@@";
constexpr std::string_view k_pid = "@@PID@@";

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) {
    return;
  }
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// `pid` where it stands as a number of its own (not inside a longer one).
void replace_number(std::string& text, const std::string& pid, std::string_view to) {
  if (pid.empty()) {
    return;
  }
  for (size_t at = text.find(pid); at != std::string::npos; at = text.find(pid, at)) {
    const size_t end = at + pid.size();
    const bool alone =
        (at == 0 || !is_digit(text[at - 1])) && (end == text.size() || !is_digit(text[end]));
    if (alone) {
      text.replace(at, pid.size(), to);
      at += to.size();
    } else {
      at = end;
    }
  }
}

// A file's identity: a reinstalled or upgraded library is another file.
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return "";
  }
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
         std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace

std::optional<EnvVars> pmix_env_template(const EnvVars& env, const PmixRunNames& run) {
  EnvVars out;
  for (const auto& [name, value] : env) {
    if (name.empty() || name.find_first_of("=\n") != std::string::npos ||
        value.find('\n') != std::string::npos || value.find("@@") != std::string::npos) {
      return std::nullopt;
    }
    std::string v = value;
    if (!run.uri.empty() && v == run.uri) {
      v = k_uri;
    } else if (!run.nspace.empty() && v == run.nspace) {
      v = k_nspace;
    } else if (!run.tmpdir.empty() && v.find(run.tmpdir) != std::string::npos) {
      replace_all(v, run.tmpdir, k_tmpdir);
      const std::string before = v;
      replace_number(v, run.pid, k_pid);
      if (v != before) {
        // Something the server makes as it starts, named for its process
        // (the shared-memory stores' pmix_dstor_ds21_<pid>): a worker started
        // before the server would look for it in vain.
        return std::nullopt;
      }
    }
    out.emplace_back(name, std::move(v));
  }
  return out;
}

EnvVars pmix_env_for_run(const EnvVars& tmpl, const PmixRunNames& run) {
  EnvVars out;
  out.reserve(tmpl.size());
  for (const auto& [name, value] : tmpl) {
    std::string v = value;
    if (v == k_uri) {
      v = run.uri;
    } else if (v == k_nspace) {
      v = run.nspace;
    } else {
      replace_all(v, k_tmpdir, run.tmpdir);
      replace_all(v, k_pid, run.pid);
    }
    out.emplace_back(name, std::move(v));
  }
  return out;
}

std::string pmix_env_fingerprint(const EnvMap& env) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string key = "host=" + std::string(host);
  for (const auto& [name, value] : env) {  // sorted: an EnvMap is a std::map
    if (name.rfind("PMIX_MCA_", 0) == 0 || name == "LD_LIBRARY_PATH" || name == "LD_PRELOAD") {
      key += ";" + name + "=" + value;
    }
  }
  std::replace(key.begin(), key.end(), '\n', ' ');
  return key;
}

std::string pmix_env_cache_path() {
  return posix::temp_dir() + "/ddplaunch-pmix-" + std::to_string(::geteuid()) + ".env";
}

std::optional<EnvVars> read_pmix_env_cache(const std::string& path,
                                           const std::string& fingerprint) {
  const auto body = posix::read_cache_file(path, std::string(k_env_cache_magic) + fingerprint,
                                           k_max_env_cache_bytes);
  if (!body) {
    return std::nullopt;
  }
  // "library <path>\t<identity>", then NAME=VALUE lines.
  size_t at = body->find('\n');
  const std::string_view first = std::string_view(*body).substr(0, at);
  constexpr std::string_view k_library = "library ";
  const size_t tab = first.find('\t');
  if (at == std::string::npos || first.substr(0, k_library.size()) != k_library ||
      tab == std::string_view::npos) {
    return std::nullopt;
  }
  const std::string library(first.substr(k_library.size(), tab - k_library.size()));
  const std::string_view identity = first.substr(tab + 1);
  if (identity.empty() || file_identity(library) != identity) {
    return std::nullopt;  // another libpmix now: its environment is learnt again
  }
  EnvVars out;
  for (++at; at < body->size();) {
    const size_t end = std::min(body->find('\n', at), body->size());
    const std::string_view line = std::string_view(*body).substr(at, end - at);
    const size_t eq = line.find('=');
    if (eq == 0 || eq == std::string_view::npos) {
      return std::nullopt;
    }
    out.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
    at = end + 1;
  }
  if (out.empty()) {
    return std::nullopt;
  }
  return out;
}

bool write_pmix_env_cache(const std::string& path, const std::string& fingerprint,
                          const std::string& library, const EnvVars& tmpl) {
  const std::string identity = file_identity(library);
  if (identity.empty() || library.find_first_of("\t\n") != std::string::npos || tmpl.empty()) {
    return false;
  }
  std::string body = "library " + library + "\t" + identity + "\n";
  for (const auto& [name, value] : tmpl) {
    body += name + "=" + value + "\n";
  }
  return posix::write_cache_file(path, std::string(k_env_cache_magic) + fingerprint, body);
}

bool pmix_lazy_enabled(const EnvMap& env) {
  const auto it = env.find("DDPLAUNCH_PMIX_LAZY");
  return it == env.end() || !(it->second == "0" || it->second == "off" || it->second == "no");
}

}  // namespace ddplaunch
