#include "node/identity.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "log.hpp"
#include "node/resources.hpp"
#include "posix/fd.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"

namespace ddplaunch {

std::string new_job_id() {
  uint64_t random = 0;
  if (::getrandom(&random, sizeof(random), GRND_NONBLOCK) != sizeof(random)) {
    random = static_cast<uint64_t>(::getpid()) << 40 ^
             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(random));
  return out;
}

namespace {

// The address other hosts most likely reach this one at: the one holding the
// default route, else the first non-loopback one.
std::optional<std::string> outward_addr() {
  auto candidates = dialable_addrs();
  if (candidates.size() == 1 && posix::is_loopback(candidates.front())) {
    return std::nullopt;
  }
  if (candidates.size() > 1) {
    // Any address outside this host's networks takes the default route
    // (nothing is sent); none when there is no default route.
    if (auto via = posix::route_source("192.0.2.255"); via && !posix::is_loopback(*via)) {
      return via;
    }
  }
  return candidates.front();
}

}  // namespace

// This host's addresses other hosts may dial: every non-loopback one, else loopback.
std::vector<std::string> dialable_addrs() {
  std::vector<std::string> out;
  for (const auto& i : posix::interfaces()) {
    if (!i.loopback && !i.addr.starts_with("fe80:")) {
      out.push_back(i.addr);
    }
  }
  if (out.empty()) {
    out.push_back("127.0.0.1");
  }
  return out;
}

// The address this node advertises (--local-addr, else the one its packets to
// the master leave from, else its host name's) and the interface holding it.
void find_own_address(const Config& config, const std::string& master_addr, NodeIdentity& self) {
  self.host = local_hostname();
  if (!config.local_addr.empty()) {
    self.addr = config.local_addr;
  } else if (config.nnodes > 1 && !config.dry_run) {
    self.addr = posix::route_source(master_addr).value_or(posix::resolve_numeric(self.host));
    if (posix::is_loopback(self.addr) && !posix::is_loopback(master_addr)) {
      // The master's name is this host's and maps to loopback here (Debian's
      // 127.0.1.1 self entry): advertise what other hosts reach instead.
      self.addr = outward_addr().value_or(self.addr);
    }
  } else if (config.nnodes == 1) {
    // One node: its workers meet on loopback, and the host name need not be
    // resolved (no resolver on the launch path).
    self.addr = "127.0.0.1";
  } else {
    self.addr = posix::resolve_numeric(self.host);
  }
  if (config.nnodes == 1) {
    return;  // one node: gloo and NCCL find each other on this host
  }
  if (auto iface = posix::interface_holding(self.addr, posix::interfaces())) {
    self.ifname = iface->name;
  }
  if (posix::is_loopback(self.addr) && !posix::is_loopback(master_addr) && !config.dry_run) {
    log::warn(
        "this node advertises the loopback address {} in a job across hosts: other nodes "
        "cannot reach its workers; give --local-addr with an address they can dial",
        self.addr);
  }
}

std::string interface_towards(const std::string& peer_addr) {
  const auto source = posix::route_source(peer_addr);
  if (!source) {
    return "";
  }
  const auto iface = posix::interface_holding(*source, posix::interfaces());
  return iface ? iface->name : "";
}

bool plausible_host(const std::string& name) {
  in_addr v4 = {};
  in6_addr v6 = {};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1 || inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    return true;
  }
  if (name.empty() || name.size() > 253) {
    return false;
  }
  std::string lower;
  for (const char c : name) {
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (lower == "invalid" || lower.ends_with(".invalid") || lower.ends_with(".invalid.")) {
    return false;  // RFC 6761: never resolves
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) {
      dot = name.size();
    }
    const std::string_view label(name.data() + start, dot - start);
    const bool trailing_dot = label.empty() && dot == name.size() && start > 0;
    if (!trailing_dot) {
      if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
        return false;
      }
      for (const char c : label) {
        if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '_') {
          return false;
        }
      }
    }
    start = dot + 1;
  }
  return true;
}

void wait_for_master_name(const Config& config, const SleepUntil& sleep_until,
                          const Resolve& resolve) {
  if (config.nnodes == 1 || config.dry_run || config.master_via_pmix) {
    return;
  }
  const std::string& name = config.master_addr;
  if (!plausible_host(name)) {
    throw UsageError("cannot resolve --master-addr " + name +
                     ": it can never be a host name or address (not a name, or one under the "
                     "reserved .invalid); give node 0's host name or address");
  }
  auto system_resolve = [](const std::string& host) {
    addrinfo hints = {};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (res != nullptr) {
      freeaddrinfo(res);
    }
    return rc;
  };
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::milliseconds(static_cast<long long>(config.rdzv_timeout_s * 1000));
  auto backoff = std::chrono::milliseconds(100);
  auto next_note = start + std::chrono::seconds(10);
  for (int attempt = 1;; ++attempt) {
    const int rc = resolve ? resolve(name) : system_resolve(name);
    if (rc == 0) {
      if (attempt > 1) {
        log::info("--master-addr {} resolves now", name);
      }
      return;
    }
    const auto now = Clock::now();
    if (attempt == 1) {
      log::info(
          "waiting for --master-addr {} to resolve ({}): a name that exists only once node 0 "
          "runs (a Kubernetes headless service, a DNS entry being created) is waited for up to "
          "--rdzv-timeout {} s",
          name, gai_strerror(rc), config.rdzv_timeout_s);
    } else if (now >= next_note) {
      log::info("still waiting for --master-addr {} to resolve ({} s)", name,
                std::chrono::duration_cast<std::chrono::seconds>(now - start).count());
      next_note = now + std::chrono::seconds(10);
    }
    if (now >= deadline) {
      throw LaunchError(k_exit_rendezvous,
                        "--master-addr " + name + " did not resolve within --rdzv-timeout " +
                            std::to_string(static_cast<long long>(config.rdzv_timeout_s)) + " s (" +
                            gai_strerror(rc) +
                            "); give node 0's host name or address as this node can resolve it");
    }
    sleep_until(std::min(now + backoff, deadline));  // the last try at the deadline
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

// This program image's peak resident set (VmHWM). getrusage's ru_maxrss is not
// it: that also keeps the peak of the image before execve, which for a
// launcher started by Python is Python's whole RSS, shared by the fork.
long peak_rss_kib() {
  if (const auto status = posix::read_small_file("/proc/self/status", 64 * 1024)) {
    if (const auto at = status->find("VmHWM:"); at != std::string::npos) {
      if (const auto kib = leading_integer(std::string_view(*status).substr(at + 6))) {
        return static_cast<long>(*kib);
      }
    }
  }
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace ddplaunch
