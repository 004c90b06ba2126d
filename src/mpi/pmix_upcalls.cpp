// What every upcall family shares: the one server the upcalls post to, the
// refusal of a required directive a family does not know, the table handed
// to libpmix (each family's adapters live beside its handler:
// pmix_events.cpp, pmix_fence.cpp, pmix_direct_modex.cpp), and a modex
// call's completion.
#include "mpi/pmix_upcalls.hpp"

#if DDPLAUNCH_HAVE_PMIX

#include <atomic>
#include <cstring>
#include <memory>

#include "log.hpp"
#include "mpi/pmix_info.hpp"

namespace ddplaunch {

namespace {

std::atomic<PmixServer*> g_server{nullptr};

pmix_server_module_t g_module = [] {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof m);
  m.client_connected = upcall_connected;
  m.client_connected2 = upcall_connected2;
  m.client_finalized = upcall_finalized;
  m.abort = upcall_abort;
  m.fence_nb = upcall_fence;
  m.direct_modex = upcall_direct_modex;
  return m;
}();

void release_data(void* p) {
  delete static_cast<std::string*>(p);
}

}  // namespace

bool post_upcall(PmixServer::Upcall up) {
  PmixServer* server = g_server.load();
  if (server == nullptr) {
    return false;
  }
  server->post(std::make_unique<PmixServer::Upcall>(std::move(up)));
  return true;
}

bool refuses_directives(const char* upcall, const pmix_info_t info[], size_t ninfo,
                        std::initializer_list<const char*> known) {
  const std::string unknown = first_unknown_required(info, ninfo, known);
  if (!unknown.empty()) {
    log::debug("PMIx {} refused: it requires {}, which ddplaunch does not support", upcall,
               unknown);
  }
  return !unknown.empty();
}

pmix_server_module_t* pmix_upcall_module() {
  return &g_module;
}

void set_upcall_target(PmixServer* server) {
  g_server = server;
}

PmixServer* upcall_target() {
  return g_server.load();
}

void PmixServer::complete(const ModexDone& done, const std::string& nspace, bool ok,
                          std::string data, bool timed_out) {
  if (done.cbfunc == nullptr) {
    return;
  }
  if (!m_job || nspace != m_job->nspace) {
    // A past round's call was dropped by libpmix with its namespace
    // (start_round deregistered it); any other is refused.
    if (nspace != m_deregistered) {
      done.cbfunc(PMIX_ERR_INVALID_NAMESPACE, nullptr, 0, done.cbdata, nullptr, nullptr);
    }
    return;
  }
  if (!ok) {
    done.cbfunc(timed_out ? PMIX_ERR_TIMEOUT : PMIX_ERROR, nullptr, 0, done.cbdata, nullptr,
                nullptr);
    return;
  }
  auto owned = std::make_unique<std::string>(std::move(data));
  const char* bytes = owned->data();
  const size_t size = owned->size();
  done.cbfunc(PMIX_SUCCESS, bytes, size, done.cbdata, release_data, owned.release());
}

}  // namespace ddplaunch

#endif
