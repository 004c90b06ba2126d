// PmixServer's direct modex family: a local worker wants a remote rank's
// data, which no fence brought. libpmix's direct_modex upcall is read on its
// thread into a DmodexCall; on the loop the rank's node is asked through the
// store (DirectModex); and this node answers the others' requests for its
// ranks, once one of its workers joined, with what libpmix gives
// (PMIx_server_dmodex_request, completed by local_modex_done on its thread).
#include "mpi/pmix_upcalls.hpp"

#if DDPLAUNCH_HAVE_PMIX

#include <memory>

#include "mpi/libpmix.hpp"
#include "mpi/pmix_info.hpp"

namespace ddplaunch {

namespace {

// How long a direct modex request waits for the rank's node without a
// PMIX_TIMEOUT of its own.
constexpr auto k_dmodex_timeout = std::chrono::minutes(10);

}  // namespace

// A local worker wants a remote rank's data, which no fence brought
// (direct modex): the node hosting that rank is asked through the store.
pmix_status_t upcall_direct_modex(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                                  pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  if (proc == nullptr || cbfunc == nullptr || upcall_target() == nullptr) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  // PMIX_REQUIRED_KEY is not read (the request asks for the rank's whole
  // data): a request that requires it is refused.
  if (refuses_directives("direct modex", info, ninfo, {PMIX_TIMEOUT})) {
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
  return post_upcall({std::move(call)}) ? PMIX_SUCCESS : PMIX_ERR_NOT_SUPPORTED;
}

void PmixServer::direct_modex(DmodexCall& call) {
  const int node = m_job->node_of(call.rank);
  if (!m_dmodex || node < 0 || node == m_job->node_rank) {
    complete(call.done, call.nspace, false, {});  // nobody else to ask
    return;
  }
  const auto timeout =
      call.timeout.count() > 0
          ? std::chrono::duration_cast<StoreConnection::Duration>(call.timeout)
          : std::chrono::duration_cast<StoreConnection::Duration>(k_dmodex_timeout);
  auto shared = std::make_shared<DmodexCall>(std::move(call));
  m_dmodex->request(m_job->nspace, m_job->node_rank, node, shared->rank, timeout,
                    [this, shared](bool ok, std::string data) {
                      complete(shared->done, shared->nspace, ok, std::move(data));
                    });
}

// Once a local worker joined, this node answers the others' direct modex
// requests for its ranks (a job of programs that never call MPI_Init never
// parks a request on the store for it).
void PmixServer::serve_direct_modex() {
  std::string why;
  const Libpmix* api = load_libpmix(why);
  if (!m_dmodex || !m_job || api == nullptr) {
    return;
  }
  m_dmodex->serve(m_job->nspace, m_job->node_rank,
                  [api, nspace = m_job->nspace](int rank, DirectModex::Reply answer) {
                    auto up = std::make_unique<Upcall>(Upcall{LocalModex{}});
                    std::get<LocalModex>(up->message).answer = std::move(answer);
                    const pmix_proc_t proc = make_proc(nspace, static_cast<uint32_t>(rank));
                    Upcall* raw = up.release();
                    if (api->dmodex_request(&proc, local_modex_done, raw) != PMIX_SUCCESS) {
                      std::unique_ptr<Upcall> failed(raw);
                      std::get<LocalModex>(failed->message).answer(false, {});
                    }
                  });
}

void local_modex_done(pmix_status_t status, char* data, size_t size, void* cbdata) {
  std::unique_ptr<PmixServer::Upcall> up(static_cast<PmixServer::Upcall*>(cbdata));
  auto& local = std::get<LocalModex>(up->message);
  local.ok = status == PMIX_SUCCESS;
  if (local.ok && data != nullptr) {
    local.data.assign(data, size);
  }
  if (PmixServer* server = upcall_target(); server != nullptr) {
    server->post(std::move(up));
  }
}

}  // namespace ddplaunch

#endif
