#include "mpi/pmix_exchange.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "config/launch_error.hpp"
#include "log.hpp"
#include "mpi/libpmix.hpp"
#include "posix/fd.hpp"
#include "posix/interfaces.hpp"

#if DDPLAUNCH_HAVE_PMIX
#include <pmix.h>
#endif

namespace ddplaunch {

namespace {

constexpr const char* k_key = "ddplaunch.master_addrs";
constexpr const char* k_token_key = "ddplaunch.job_token";

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);) {
    if (!item.empty()) {
      out.push_back(item);
    }
  }
  return out;
}

#if DDPLAUNCH_HAVE_PMIX

struct Outcome {
  std::string addrs;  // node 0's list, comma-separated
  std::string token;  // node 0's offered job token, if any
  std::string error;  // set when the exchange failed
};

void set_info_bool(pmix_info_t& info, const char* key, bool value) {
  std::memset(&info, 0, sizeof(info));
  std::strncpy(info.key, key, PMIX_MAX_KEYLEN);
  info.value.type = PMIX_BOOL;
  info.value.data.flag = value;
}

void set_info_int(pmix_info_t& info, const char* key, int value) {
  std::memset(&info, 0, sizeof(info));
  std::strncpy(info.key, key, PMIX_MAX_KEYLEN);
  info.value.type = PMIX_INT;
  info.value.data.integer = value;
}

// Blocking: init, put (node 0), commit, fence with the data, get, finalize.
Outcome exchange(const Libpmix& api, int node_rank, const std::string& mine,
                 const std::string& token, int timeout_s) {
  Outcome out;
  pmix_proc_t self;
  std::memset(&self, 0, sizeof(self));
  pmix_status_t rc = api.init(&self, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    out.error = std::string("PMIx_Init: ") + api.error_string(rc);
    return out;
  }
  auto fail = [&](const char* what) {
    out.error = std::string(what) + ": " + api.error_string(rc);
  };
  if (static_cast<int>(self.rank) != node_rank) {
    log::debug("PMIx rank {} has node rank {}", self.rank, node_rank);
  }
  if (self.rank == 0) {  // mpirun's first process: node 0, as OMPI_COMM_WORLD_RANK says
    pmix_value_t value;
    std::memset(&value, 0, sizeof(value));
    value.type = PMIX_STRING;
    value.data.string = const_cast<char*>(mine.c_str());
    rc = api.put(PMIX_GLOBAL, k_key, &value);
    if (rc != PMIX_SUCCESS) {
      fail("PMIx_Put");
    }
    if (out.error.empty() && !token.empty()) {
      value.data.string = const_cast<char*>(token.c_str());
      if ((rc = api.put(PMIX_GLOBAL, k_token_key, &value)) != PMIX_SUCCESS) {
        fail("PMIx_Put");
      }
    }
  }
  if (out.error.empty() && (rc = api.commit()) != PMIX_SUCCESS) {
    fail("PMIx_Commit");
  }
  std::array<pmix_info_t, 2> info;
  set_info_bool(info[0], PMIX_COLLECT_DATA, true);
  set_info_int(info[1], PMIX_TIMEOUT, timeout_s);
  if (out.error.empty() && (rc = api.fence(nullptr, 0, info.data(), info.size())) != PMIX_SUCCESS) {
    fail("PMIx_Fence");
  }
  if (out.error.empty()) {
    pmix_proc_t zero;
    std::memset(&zero, 0, sizeof(zero));
    std::memcpy(zero.nspace, self.nspace, sizeof(zero.nspace));
    zero.rank = 0;
    pmix_value_t* got = nullptr;
    rc = api.get(&zero, k_key, &info[1], 1, &got);
    if (rc != PMIX_SUCCESS || got == nullptr || got->type != PMIX_STRING ||
        got->data.string == nullptr) {
      fail("PMIx_Get of node 0's address");
    } else {
      out.addrs = got->data.string;  // `got` is left to the process: one small value
      got = nullptr;
      // Absent when node 0 had a token of its own and offered none.
      if (api.get(&zero, k_token_key, &info[1], 1, &got) == PMIX_SUCCESS && got != nullptr &&
          got->type == PMIX_STRING && got->data.string != nullptr) {
        out.token = got->data.string;
      }
    }
  }
  api.finalize(nullptr, 0);
  return out;
}

#endif  // DDPLAUNCH_HAVE_PMIX

}  // namespace

bool pmix_built_in() {
  return DDPLAUNCH_HAVE_PMIX != 0;
}

std::string choose_master_addr(const std::vector<std::string>& master_addrs,
                               const std::vector<std::string>& own_networks) {
  for (const auto& addr : master_addrs) {
    for (const auto& net : own_networks) {
      if (!posix::is_loopback(addr) && posix::in_network(addr, net)) {
        return addr;
      }
    }
  }
  return master_addrs.empty() ? "127.0.0.1" : master_addrs.front();
}

PmixShared pmix_exchange(int node_rank, const std::vector<std::string>& own_addrs,
                         const std::string& offer_token, std::chrono::milliseconds timeout,
                         const WaitReadable& wait) {
#if DDPLAUNCH_HAVE_PMIX
  std::string why;
  const Libpmix* api = load_libpmix(why);
  if (api == nullptr) {
    throw LaunchError(k_exit_rendezvous, "mpirun started ddplaunch but " + why +
                                             "; or give node 0's address with --master-addr");
  }
  std::string mine;
  for (const auto& a : own_addrs) {
    mine += (mine.empty() ? "" : ",") + a;
  }
  const int timeout_s = static_cast<int>(std::max<int64_t>(1, timeout.count() / 1000));
  // The exchange blocks; it runs on its own thread (which inherits the
  // blocked signals) while the caller's wait watches the signals too.
  auto result = std::make_shared<Outcome>();
  auto done = std::make_shared<posix::Fd>(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  std::thread worker([api, node_rank, mine, offer_token, timeout_s, result, done] {
    *result = exchange(*api, node_rank, mine, offer_token, timeout_s);
    const uint64_t one = 1;
    (void)!::write(done->get(), &one, sizeof(one));
  });
  bool arrived = false;
  try {
    arrived = wait(done->get(), std::chrono::steady_clock::now() + timeout);
  } catch (...) {
    worker.detach();  // a stop signal: the process is leaving; the thread owns what it uses
    throw;
  }
  if (!arrived) {
    worker.detach();
    throw LaunchError(k_exit_rendezvous,
                      "node 0's address did not arrive through PMIx within --rdzv-timeout; "
                      "did mpirun start one ddplaunch per node?");
  }
  worker.join();
  if (!result->error.empty()) {
    throw LaunchError(k_exit_rendezvous, "cannot get node 0's address from mpirun's PMIx server (" +
                                             result->error + "); give it with --master-addr");
  }
  std::vector<std::string> networks;
  for (const auto& i : posix::interfaces()) {
    networks.push_back(i.addr + "/" + std::to_string(i.prefix));
  }
  std::string chosen = choose_master_addr(split(result->addrs, ','), networks);
  log::debug("node 0 has {}; dialing {}", result->addrs, chosen);
  return PmixShared{chosen, result->token};
#else
  (void)node_rank;
  (void)own_addrs;
  (void)offer_token;
  (void)timeout;
  (void)wait;
  throw LaunchError(k_exit_rendezvous,
                    "mpirun started ddplaunch on several hosts, and this ddplaunch was built "
                    "without PMIx: give node 0's address with --master-addr");
#endif
}

}  // namespace ddplaunch
