// The job's store, as the launcher sets it up: the secret it checks (read
// once), hosting it on node 0, the link that fits (node 0 gets a HostLink,
// every other agent a MemberLink, both over one connection to the store),
// and the store the workers are given. Reads files and binds sockets.
#pragma once

#include <memory>

#include "config/config.hpp"
#include "config/env_map.hpp"
#include "posix/clock.hpp"
#include "rendezvous/store_link.hpp"
#include "store/connection.hpp"
#include "store/server.hpp"

namespace ddplaunch {

// The store, if this agent is node 0: --node-rank 0, or an automatic rank
// on the host --master-addr names, where the first agent to bind the port is
// node 0 (another agent on this host got there first: null). Null on every
// other node. Throws LaunchError (exit 3) when --node-rank 0 cannot bind the
// port.
std::unique_ptr<StoreServer> host_store(const Config& config, const StoreAddress& address);

// A HostLink when this node hosts the store (`hosting`, which names the
// clients it refused in a rendezvous timeout), else a MemberLink. `config`,
// `connection`, `clock` and `hosting` must outlive it.
std::unique_ptr<StoreLink> make_store_link(const Config& config, const StoreAddress& address,
                                           StoreConnection& connection, const Clock& clock,
                                           const StoreServer* hosting);

// The job's secret: --rdzv-token-file, else DDPLAUNCH_RDZV_TOKEN, else (a
// multi-node job) the user's token file when it exists; trailing whitespace
// (a file's newline) is not part of it. Empty: none. Throws UsageError for a
// file that cannot be read or an empty secret.
std::string load_token(const Config& config, const EnvMap& env);

// 32 random bytes from the kernel, as 64 hex characters (not OpenSSL's
// generator: it would cost the launcher ~2 MiB of memory at start).
std::string random_secret();

// The user's token file (`ddplaunch token init`): $XDG_CONFIG_HOME/ddplaunch/
// token, else ~/.config/ddplaunch/token; "" when neither variable is set.
std::string user_token_file(const EnvMap& env);

// Where every worker finds the job's store (`ddplaunch store`,
// StoreClient::from_environment(), docs/ENVIRONMENT.md), written into
// `worker_env`: node 0's in a multi-node job, with the workers' credential
// (derived from the job's token, never the token itself); a one-node job's
// own on loopback, with a fresh secret, which is returned (null otherwise)
// listening but not yet served: the caller serve()s it after the first spawn.
// Also DDPLAUNCH_EXE, the launcher's own path.
std::unique_ptr<StoreServer> give_workers_a_store(const Config& config, const StoreAddress& address,
                                                  EnvMap& worker_env);

}  // namespace ddplaunch
