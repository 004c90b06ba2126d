// PmixServer's fence family: libpmix's fence_nb upcall, read on its thread
// into a FenceCall (a required directive it does not know refused), and
// the call carried out on the loop: a fence among this node's ranks alone
// completes here, one across nodes goes through the store (FenceExchange),
// within its PMIX_TIMEOUT. Completed once, through libpmix's callback.
#include "mpi/pmix_upcalls.hpp"

#if DDPLAUNCH_HAVE_PMIX

#include <algorithm>
#include <memory>

#include "log.hpp"
#include "mpi/pmix_info.hpp"

namespace ddplaunch {

pmix_status_t upcall_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                           size_t ninfo, char* data, size_t ndata, pmix_modex_cbfunc_t cbfunc,
                           void* cbdata) {
  if (cbfunc == nullptr || upcall_target() == nullptr) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  // What a fence may ask that it does: collect the data, within a timeout,
  // over procs in any order. PMIX_LOCAL_COLLECTIVE_STATUS is not read: a
  // fence that requires it is refused.
  if (refuses_directives("fence", info, ninfo,
                         {PMIX_COLLECT_DATA, PMIX_TIMEOUT, PMIX_SORTED_PROC_ARRAY})) {
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
  return post_upcall({std::move(call)}) ? PMIX_SUCCESS : PMIX_ERR_NOT_SUPPORTED;
}

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
  auto done = [this, shared](FenceExchange::Outcome outcome, std::string data) {
    complete(shared->done, shared->nspace, outcome == FenceExchange::Outcome::k_ok, std::move(data),
             outcome == FenceExchange::Outcome::k_timed_out);
  };
  // Among every node (whatever the ranks' set): up and down the tree of
  // agents, each link carrying the data once; among some nodes (a PMIx
  // group's) through the job's store.
  if (static_cast<int>(nodes.size()) == job.nnodes() && m_tree_fences && job.tree_fanout > 0) {
    m_tree_fences->enter(job.nspace, signature, job.node_rank, job.nnodes(), job.tree_fanout,
                         std::move(shared->data), std::move(done), timeout);
    return;
  }
  m_fences->enter(job.nspace, signature, nodes, job.node_rank, shared->data, std::move(done),
                  timeout);
}

}  // namespace ddplaunch

#endif
