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

bool post(PmixServer::Upcall up) {
  PmixServer* server = g_server.load();
  if (server == nullptr) {
    return false;
  }
  server->post(std::make_unique<PmixServer::Upcall>(std::move(up)));
  return true;
}

// A call with a required directive its family does not know is refused.
bool refused(const char* upcall, const pmix_info_t info[], size_t ninfo,
             std::initializer_list<const char*> known) {
  const std::string unknown = first_unknown_required(info, ninfo, known);
  if (!unknown.empty()) {
    log::debug("PMIx {} refused: it requires {}, which ddplaunch does not support", upcall,
               unknown);
  }
  return !unknown.empty();
}

void post_event(const pmix_proc_t* proc, MpiEvent::Kind kind, int status, const char* message) {
  if (proc == nullptr) {
    return;
  }
  WorkerSaid said;
  said.nspace = proc->nspace;
  said.event.kind = kind;
  said.event.rank = static_cast<int>(proc->rank);
  said.event.status = status;
  said.event.message = message != nullptr ? message : "";
  post({std::move(said)});
}

pmix_status_t on_connected(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t, void*) {
  post_event(proc, MpiEvent::Kind::k_connected, 0, nullptr);
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t on_connected2(const pmix_proc_t* proc, void*, pmix_info_t[], size_t, pmix_op_cbfunc_t,
                            void*) {
  post_event(proc, MpiEvent::Kind::k_connected, 0, nullptr);
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t on_finalized(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t, void*) {
  post_event(proc, MpiEvent::Kind::k_finalized, 0, nullptr);
  return PMIX_OPERATION_SUCCEEDED;
}

// MPI_Abort: queued before the caller is released, so the main thread knows
// of it before it can see the process end.
pmix_status_t on_abort(const pmix_proc_t* proc, void*, int status, const char msg[], pmix_proc_t[],
                       size_t, pmix_op_cbfunc_t, void*) {
  post_event(proc, MpiEvent::Kind::k_aborted, status, msg);
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t on_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                       size_t ninfo, char* data, size_t ndata, pmix_modex_cbfunc_t cbfunc,
                       void* cbdata) {
  if (cbfunc == nullptr || upcall_target() == nullptr) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  // What a fence may ask that it does: collect the data, within a timeout,
  // over procs in any order. PMIX_LOCAL_COLLECTIVE_STATUS is not read: a
  // fence that requires it is refused.
  if (refused("fence", info, ninfo, {PMIX_COLLECT_DATA, PMIX_TIMEOUT, PMIX_SORTED_PROC_ARRAY})) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  FenceCall call;
  for (size_t i = 0; i < nprocs; ++i) {
    if (call.nspace.empty()) {
      call.nspace = procs[i].nspace;
    }
    call.ranks.push_back(procs[i].rank == PMIX_RANK_WILDCARD ? -1
                                                             : static_cast<int>(procs[i].rank));
  }
  bool collect = false;
  for (size_t i = 0; i < ninfo; ++i) {
    if (info_is(info[i], PMIX_COLLECT_DATA)) {
      collect = info_true(info[i]);
    } else if (info_is(info[i], PMIX_TIMEOUT)) {
      call.timeout = info_seconds(info[i]).value_or(std::chrono::seconds(0));
    }
  }
  if (collect && data != nullptr) {
    call.data.assign(data, ndata);
  }
  call.done = {cbfunc, cbdata};
  return post({std::move(call)}) ? PMIX_SUCCESS : PMIX_ERR_NOT_SUPPORTED;
}

// A local worker wants a remote rank's data, which no fence brought
// (direct modex): the node hosting that rank is asked through the store.
pmix_status_t on_direct_modex(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                              pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  if (proc == nullptr || cbfunc == nullptr || upcall_target() == nullptr) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  // PMIX_REQUIRED_KEY is not read (the request asks for the rank's whole
  // data): a request that requires it is refused.
  if (refused("direct modex", info, ninfo, {PMIX_TIMEOUT})) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  DmodexCall call;
  call.nspace = proc->nspace;
  call.rank = static_cast<int>(proc->rank);
  for (size_t i = 0; i < ninfo; ++i) {
    if (info_is(info[i], PMIX_TIMEOUT)) {
      call.timeout = info_seconds(info[i]).value_or(std::chrono::seconds(0));
    }
  }
  call.done = {cbfunc, cbdata};
  return post({std::move(call)}) ? PMIX_SUCCESS : PMIX_ERR_NOT_SUPPORTED;
}

pmix_server_module_t g_module = [] {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof m);
  m.client_connected = on_connected;
  m.client_connected2 = on_connected2;
  m.client_finalized = on_finalized;
  m.abort = on_abort;
  m.fence_nb = on_fence;
  m.direct_modex = on_direct_modex;
  return m;
}();

}  // namespace

pmix_server_module_t* pmix_upcall_module() {
  return &g_module;
}

void set_upcall_target(PmixServer* server) {
  g_server = server;
}

PmixServer* upcall_target() {
  return g_server.load();
}

void local_modex_done(pmix_status_t status, char* data, size_t size, void* cbdata) {
  std::unique_ptr<PmixServer::Upcall> up(static_cast<PmixServer::Upcall*>(cbdata));
  auto& local = std::get<LocalModex>(up->message);
  local.ok = status == PMIX_SUCCESS;
  if (local.ok && data != nullptr) {
    local.data.assign(data, size);
  }
  if (PmixServer* server = g_server.load(); server != nullptr) {
    server->post(std::move(up));
  }
}

}  // namespace ddplaunch

#endif
