// PmixServer's fence and direct modex families: a fence among this node's
// ranks alone completes here, one across nodes goes through the store
// (FenceExchange); a remote rank's data is asked of its node (DirectModex),
// and this node answers the others' requests for its ranks once one of its
// workers joined. Each call is completed once, through libpmix's callback.
#include "mpi/pmix_server.hpp"

#if DDPLAUNCH_HAVE_PMIX

#include <algorithm>
#include <memory>

#include "log.hpp"
#include "mpi/libpmix.hpp"
#include "mpi/pmix_info.hpp"
#include "mpi/pmix_upcalls.hpp"

namespace ddplaunch {

namespace {

// How long a direct modex request waits for the rank's node without a
// PMIX_TIMEOUT of its own.
constexpr auto k_dmodex_timeout = std::chrono::minutes(10);

void release_data(void* p) {
  delete static_cast<std::string*>(p);
}

}  // namespace

void PmixServer::fence(FenceCall& call) {
  const PmixJob& job = *m_job;
  std::vector<int> nodes;
  std::string signature = "all";
  const bool all = std::find(call.ranks.begin(), call.ranks.end(), -1) != call.ranks.end();
  if (all) {
    for (int n = 0; n < job.nnodes(); ++n) {
      nodes.push_back(n);
    }
  } else {
    std::vector<int> ranks = call.ranks;
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    uint64_t hash = 1469598103934665603ULL;  // FNV-1a of the rank list
    for (int r : ranks) {
      hash = (hash ^ static_cast<uint64_t>(r)) * 1099511628211ULL;
      if (const int node = job.node_of(r); node >= 0) {
        nodes.push_back(node);
      }
    }
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    signature = fmt::format("{:016x}", hash);
  }
  const bool only_here = nodes.size() <= 1;
  if (only_here || !m_fences) {
    complete(call.done, call.nspace, only_here, std::move(call.data));
    return;
  }
  log::debug("PMIx fence among {} node(s): {} bytes from this node", nodes.size(),
             call.data.size());
  auto shared = std::make_shared<FenceCall>(std::move(call));
  const auto timeout = std::chrono::duration_cast<StoreConnection::Duration>(shared->timeout);
  m_fences->enter(
      job.nspace, signature, nodes, job.node_rank, shared->data,
      [this, shared](FenceExchange::Outcome outcome, std::string data) {
        complete(shared->done, shared->nspace, outcome == FenceExchange::Outcome::k_ok,
                 std::move(data), outcome == FenceExchange::Outcome::k_timed_out);
      },
      timeout);
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
