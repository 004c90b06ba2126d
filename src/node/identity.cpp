#include "node/identity.hpp"

#include <netdb.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "node/resources.hpp"
#include "posix/fd.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"

namespace ddplaunch {

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

// Refuses a --master-addr this node cannot resolve at all (a typo), rather
// than retrying it until --rdzv-timeout; a passing DNS failure is retried.
void check_master_resolves(const Config& config) {
  if (config.nnodes == 1 || config.dry_run) {
    return;
  }
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(config.master_addr.c_str(), nullptr, &hints, &res);
  if (res != nullptr) {
    freeaddrinfo(res);
  }
  if (rc == EAI_NONAME || rc == EAI_NODATA || rc == EAI_FAIL) {
    throw UsageError("cannot resolve --master-addr " + config.master_addr + " (" +
                     gai_strerror(rc) +
                     "); give node 0's host name or address as this node can "
                     "resolve it");
  }
}

// This program image's peak resident set (VmHWM). getrusage's ru_maxrss is not
// it: that also keeps the peak of the image before execve, which for a
// launcher started by Python is Python's whole RSS, shared by the fork.
long peak_rss_kib() {
  if (const auto status = posix::read_small_file("/proc/self/status", 64 * 1024)) {
    if (const auto at = status->find("VmHWM:"); at != std::string::npos) {
      return std::strtol(status->c_str() + at + 6, nullptr, 10);
    }
  }
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace ddplaunch
