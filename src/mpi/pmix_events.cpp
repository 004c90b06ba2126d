// PmixServer's events family: a worker's PMIx_Init, PMIx_Finalize and
// PMIx_Abort, each turned on libpmix's thread into a WorkerSaid and posted;
// handle_upcalls() gives them to the round's MpiRanks on the loop (a
// worker's first PMIx_Init also starts this node's answers to direct modex).
#include "mpi/pmix_upcalls.hpp"

#if DDPLAUNCH_HAVE_PMIX

namespace ddplaunch {

namespace {

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
  post_upcall({std::move(said)});
}

}  // namespace

pmix_status_t upcall_connected(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t, void*) {
  post_event(proc, MpiEvent::Kind::k_connected, 0, nullptr);
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t upcall_connected2(const pmix_proc_t* proc, void*, pmix_info_t[], size_t,
                                pmix_op_cbfunc_t, void*) {
  post_event(proc, MpiEvent::Kind::k_connected, 0, nullptr);
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t upcall_finalized(const pmix_proc_t* proc, void*, pmix_op_cbfunc_t, void*) {
  post_event(proc, MpiEvent::Kind::k_finalized, 0, nullptr);
  return PMIX_OPERATION_SUCCEEDED;
}

// MPI_Abort: queued before the caller is released, so the main thread knows
// of it before it can see the process end.
pmix_status_t upcall_abort(const pmix_proc_t* proc, void*, int status, const char msg[],
                           pmix_proc_t[], size_t, pmix_op_cbfunc_t, void*) {
  post_event(proc, MpiEvent::Kind::k_aborted, status, msg);
  return PMIX_OPERATION_SUCCEEDED;
}

}  // namespace ddplaunch

#endif
