#include "tool/store_tool.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "ddplaunch/store_client.hpp"
#include "log.hpp"
#include "posix/secret_file.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;
// How long the command tries to reach the store.
constexpr auto k_connect_timeout = std::chrono::seconds(10);
constexpr int k_exit_no = 1;        // not found, not swapped, timed out
constexpr int k_exit_no_store = 3;  // the store cannot be reached, or refused us

std::string var(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it != env.end() ? it->second : "";
}

std::string read_all(int fd) {
  std::string data;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      data.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      return data;
    } else if (errno != EINTR) {
      throw UsageError(std::string("store set: cannot read the value from stdin: ") +
                       std::strerror(errno));
    }
  }
}

void write_all(const std::string& data) {
  std::fwrite(data.data(), 1, data.size(), stdout);
  std::fflush(stdout);
}

std::string token_of(const StoreCommand& cmd, const EnvMap& env) {
  if (cmd.token_file.empty()) {
    return var(env, "DDPLAUNCH_STORE_TOKEN");
  }
  posix::SecretFile file =
      posix::read_secret_file(cmd.token_file, "store --token-file", cmd.strict_token);
  if (!file.warning.empty()) {
    log::warn("{}", file.warning);
  }
  return std::move(file.secret);
}

Ms timeout_of(const StoreCommand& cmd) {
  return Ms(static_cast<long long>(cmd.timeout_s * 1000 + 0.5));
}

int64_t integer(const std::string& text, const std::string& what) {
  const auto value = parse_integer(text);
  if (!value) {
    throw UsageError("store " + what + " " + text + ": not a 64-bit integer");
  }
  return *value;
}

int carry_out(const StoreCommand& cmd, StoreClient& store) {
  const auto& a = cmd.args;
  if (cmd.op == "set") {
    store.set(a[0], cmd.value_from_stdin ? read_all(STDIN_FILENO) : a[1]);
    return k_exit_ok;
  }
  if (cmd.op == "get") {
    auto value = store.get(a[0], timeout_of(cmd));
    if (!value) {
      std::fprintf(stderr, "ddplaunch store: %s does not exist after %g s\n", a[0].c_str(),
                   cmd.timeout_s);
      return k_exit_no;
    }
    write_all(*value);
    return k_exit_ok;
  }
  if (cmd.op == "wait") {
    if (!store.wait(a, timeout_of(cmd))) {
      std::fprintf(stderr, "ddplaunch store: not every key exists after %g s\n", cmd.timeout_s);
      return k_exit_no;
    }
    return k_exit_ok;
  }
  if (cmd.op == "add") {
    write_all(std::to_string(store.add(a[0], integer(a[1], "add " + a[0]))) + "\n");
    return k_exit_ok;
  }
  if (cmd.op == "cas") {
    const std::string now = store.compare_set(a[0], a[1], a[2]);
    write_all(now);
    return now == a[2] ? k_exit_ok : k_exit_no;
  }
  if (cmd.op == "delete") {
    return store.remove(a[0]) ? k_exit_ok : k_exit_no;
  }
  if (cmd.op == "check") {
    return store.check(a) ? k_exit_ok : k_exit_no;
  }
  if (cmd.op == "keys") {
    std::string out;
    for (const auto& k : store.keys()) {
      out += k + "\n";
    }
    write_all(out);
    return k_exit_ok;
  }
  write_all(std::to_string(store.num_keys()) + "\n");  // num-keys
  return k_exit_ok;
}

}  // namespace

int run_store_command(const StoreCommand& cmd, const EnvMap& env) {
  const std::string addr = !cmd.addr.empty() ? cmd.addr : var(env, "DDPLAUNCH_STORE_ADDR");
  int port = cmd.port.value_or(0);
  if (!cmd.port) {
    const std::string text = var(env, "DDPLAUNCH_STORE_PORT");
    const auto parsed = parse_integer_in(text, 1, 65535);
    if (!text.empty() && !parsed) {
      throw UsageError("DDPLAUNCH_STORE_PORT=" + text + " is not a port from 1 to 65535");
    }
    port = static_cast<int>(parsed.value_or(0));
  }
  if (addr.empty() || port < 1 || port > 65535) {
    throw UsageError(
        "store: no store to talk to: run this inside a ddplaunch job (which sets "
        "DDPLAUNCH_STORE_ADDR and DDPLAUNCH_STORE_PORT), or give --addr and --port");
  }
  const std::string prefix = cmd.prefix.value_or(
      env.contains("DDPLAUNCH_STORE_PREFIX") ? var(env, "DDPLAUNCH_STORE_PREFIX") : "user/");
  try {
    StoreClient store(addr, port, k_connect_timeout, std::chrono::seconds(30), token_of(cmd, env));
    store.set_prefix(prefix);
    return carry_out(cmd, store);
  } catch (const StoreError& e) {
    std::fprintf(stderr, "ddplaunch store: %s\n", e.what());
    return k_exit_no_store;
  }
}

}  // namespace ddplaunch
