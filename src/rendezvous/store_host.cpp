#include "rendezvous/store_host.hpp"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "config/launch_error.hpp"
#include "log.hpp"
#include "posix/fd.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"
#include "posix/secret_file.hpp"
#include "rendezvous/host_link.hpp"
#include "rendezvous/member_link.hpp"
#include "store/auth.hpp"

namespace ddplaunch {

namespace {

// Every interface (as TCPStore), so that other hosts reach node 0 whatever its
// own name resolves to there (Debian maps it to 127.0.1.1); loopback for a
// loopback job; or what --store-bind says.
std::string store_bind_address(const Config& c, const std::string& master_addr) {
  if (!c.store_bind.empty()) {
    return c.store_bind;
  }
  return posix::is_loopback(master_addr) ? master_addr : "";
}

// A token file, its warning (others may read it) shown.
std::string read_secret(const std::string& path, const std::string& what, bool strict) {
  posix::SecretFile file = posix::read_secret_file(path, what, strict);
  if (!file.warning.empty()) {
    log::warn("{}", file.warning);
  }
  return std::move(file.secret);
}

}  // namespace

std::unique_ptr<StoreServer> host_store(const Config& config, const StoreAddress& address) {
  const bool explicit_host = config.node_rank == 0;
  // Under a launching command only node 0 hosts it: an agent started there
  // without a rank is a hot spare (a host beyond MAX), which must not take
  // the port the launching command holds for node 0 beside its hold.
  if (!explicit_host &&
      (config.node_rank || config.launcher_channel || !posix::is_local_address(address.host))) {
    return nullptr;
  }
  try {
    StoreOptions options;
    options.token = address.token;
    if (!options.token.empty()) {
      options.worker_token = auth::worker_token(options.token);  // the workers' (launch.cpp)
    }
    // One connection per agent: the job's own nodes are never refused.
    options.max_clients = std::max(config.rdzv_max_clients, config.nnodes + 64);
    // Every node connects at once: a pool of 64 handshakes at 16,384 nodes
    // turned most of them away (each evicted once 100 ms old, then backing
    // off), and the join took 70 s instead of 13 (docs/PERFORMANCE.md).
    options.max_handshakes = std::clamp(config.nnodes, 64, 1024);
    auto server = std::make_unique<StoreServer>(store_bind_address(config, address.host),
                                                address.port, std::move(options));
    log::debug("hosting the store on {}:{}", address.host, address.port);
    // Said by the node that hosts the store, once it does: a node that
    // joins it is told nothing of another node's store.
    if (address.token.empty() && !posix::is_loopback(address.host)) {
      log::info(
          "the store admits any client that can reach {}:{}; to admit only this job's nodes, "
          "run `ddplaunch token init` once (a shared home directory gives every node the "
          "token), or give every node the same secret with --rdzv-token-file FILE or "
          "DDPLAUNCH_RDZV_TOKEN",
          address.host, address.port);
    }
    return server;
  } catch (const std::system_error& e) {
    if (explicit_host) {
      throw LaunchError(k_exit_rendezvous,
                        "node 0 cannot host the store: " + std::string(e.what()) +
                            "; is another job using --master-port " + std::to_string(address.port) +
                            "? choose a free port");
    }
    return nullptr;  // another agent on this host got there first: it is node 0
  }
}

std::unique_ptr<StoreLink> make_store_link(const Config& config, const StoreAddress& address,
                                           StoreConnection& connection, const Clock& clock,
                                           const StoreServer* hosting) {
  if (hosting != nullptr) {
    return std::make_unique<HostLink>(
        config, address, connection, clock, [] { return posix::pick_free_port(); },
        [hosting] { return hosting->refused_hosts(); });
  }
  return std::make_unique<MemberLink>(config, address, connection, clock);
}

// The job's secret: --rdzv-token-file, else DDPLAUNCH_RDZV_TOKEN; trailing
// whitespace (a file's newline) is not part of it. Empty: none.
std::string load_token(const Config& config, const EnvMap& env) {
  std::string token;
  if (!config.rdzv_token_file.empty()) {
    return read_secret(config.rdzv_token_file, "--rdzv-token-file", config.strict_token);
  }
  if (auto it = env.find("DDPLAUNCH_RDZV_TOKEN"); it != env.end()) {
    token = it->second;
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
    token.pop_back();
  }
  if (token.empty() && !env.contains("DDPLAUNCH_RDZV_TOKEN") && config.nnodes > 1) {
    const std::string path = user_token_file(env);
    struct stat st = {};
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) {
      log::debug("the job token comes from {} (ddplaunch token init)", path);
      return read_secret(path, "the token file", config.strict_token);
    }
  }
  if (token.empty() && env.contains("DDPLAUNCH_RDZV_TOKEN")) {
    throw UsageError(
        "the job token DDPLAUNCH_RDZV_TOKEN is empty: put a secret in it or in --rdzv-token-file "
        "(for example: head -c 32 /dev/urandom | base64 > token; chmod 600 token)");
  }
  return token;
}

std::string random_secret() {
  std::array<unsigned char, 32> secret{};
  if (::getrandom(secret.data(), secret.size(), 0) != static_cast<ssize_t>(secret.size())) {
    throw std::system_error(errno, std::generic_category(), "getrandom");
  }
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string text;
  for (const unsigned char c : secret) {
    text += k_hex[c >> 4];
    text += k_hex[c & 15];
  }
  return text;
}

std::string user_token_file(const EnvMap& env) {
  auto var = [&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  return posix::user_token_path(var("XDG_CONFIG_HOME"), var("HOME"));
}

// Where every worker finds the job's store (`ddplaunch store`,
// StoreClient::from_environment(), docs/ENVIRONMENT.md): node 0's in a
// multi-node job, with the workers' credential if the job has a token; a one-node job's own on
// loopback, with a fresh secret. Workers' keys live under the prefix.
std::unique_ptr<StoreServer> give_workers_a_store(const Config& config, const StoreAddress& address,
                                                  EnvMap& worker_env) {
  std::unique_ptr<StoreServer> own;
  // Never the job's token itself: a credential derived from it, which node
  // 0's store admits as well.
  std::string token = address.token.empty() ? "" : auth::worker_token(address.token);
  if (config.nnodes == 1) {
    StoreOptions options;
    // From the kernel directly: OpenSSL's generator would cost the launcher
    // ~2 MiB of memory at start for a secret nobody outside this host needs.
    options.token = random_secret();
    token = options.token;
    options.serve_later = true;  // launch.cpp serves it once the workers have started
    own = std::make_unique<StoreServer>("127.0.0.1", 0, std::move(options));
    worker_env["DDPLAUNCH_STORE_ADDR"] = "127.0.0.1";
    worker_env["DDPLAUNCH_STORE_PORT"] = std::to_string(own->port());
  } else {
    worker_env["DDPLAUNCH_STORE_ADDR"] = address.host;
    worker_env["DDPLAUNCH_STORE_PORT"] = std::to_string(address.port);
  }
  if (token.empty()) {
    worker_env.erase("DDPLAUNCH_STORE_TOKEN");
  } else {
    worker_env["DDPLAUNCH_STORE_TOKEN"] = token;
  }
  worker_env["DDPLAUNCH_STORE_PREFIX"] = "user/";
  // The launcher's own path, so that `"$DDPLAUNCH_EXE" store ...` works in a
  // worker when ddplaunch was started by path and is not on PATH.
  if (auto exe = posix::self_exe()) {
    worker_env["DDPLAUNCH_EXE"] = std::move(*exe);
  }
  return own;
}

}  // namespace ddplaunch
