// The upcalls libpmix makes into its host, on libpmix's own thread: each is
// turned there into one typed message (PmixServer::Upcall) and posted to the
// running server's queue, whose eventfd wakes the main thread; the server
// handles them there by family, each family's adapter beside its handler
// (pmix_events.cpp, pmix_fence.cpp, pmix_direct_modex.cpp), as Flux's shell
// plugin does. A call
// carrying a directive marked required that its family does not know is
// refused at once with PMIX_ERR_NOT_SUPPORTED. Only where the build has
// libpmix's headers. Thread-safe: posting is the server's one locked step.
#pragma once

#if DDPLAUNCH_HAVE_PMIX

#include <pmix_server.h>

#include <chrono>
#include <initializer_list>
#include <string>
#include <variant>
#include <vector>

#include "mpi/dmodex.hpp"
#include "mpi/mpi_host.hpp"
#include "mpi/pmix_server.hpp"

namespace ddplaunch {

// The completion libpmix handed with a fence or a direct modex request.
struct ModexDone {
  pmix_modex_cbfunc_t cbfunc = nullptr;
  void* cbdata = nullptr;
};

// A worker's PMIx_Init, PMIx_Finalize or PMIx_Abort.
struct WorkerSaid {
  std::string nspace;
  MpiEvent event;
};

// fence_nb: this node's ranks of a fence are all in.
struct FenceCall {
  std::string nspace;
  std::vector<int> ranks;           // its participants; -1: the whole namespace
  std::string data;                 // this node's data, when the fence collects it
  std::chrono::seconds timeout{0};  // PMIX_TIMEOUT; 0: none
  ModexDone done;
};

// direct_modex: a local worker wants a remote rank's data.
struct DmodexCall {
  std::string nspace;
  int rank = 0;
  std::chrono::seconds timeout{0};  // PMIX_TIMEOUT; 0: the default
  ModexDone done;
};

// libpmix's answer to PMIx_server_dmodex_request: a local rank's data,
// which a remote node asked for through the store.
struct LocalModex {
  bool ok = false;
  std::string data;
  DirectModex::Reply answer;
};

// A lazy server's libpmix is up (or failed to start).
struct ServerStarted {};

struct PmixServer::Upcall {
  std::variant<WorkerSaid, FenceCall, DmodexCall, LocalModex, ServerStarted> message;
};

// std::visit's handler set: one lambda per message type.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

// The table handed to PMIx_server_init.
pmix_server_module_t* pmix_upcall_module();
// Each family's adapters, on libpmix's thread, beside its handler: the
// workers' events (pmix_events.cpp), fences (pmix_fence.cpp), direct modex
// (pmix_direct_modex.cpp).
pmix_status_t upcall_connected(const pmix_proc_t* proc, void* server_object,
                               pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t upcall_connected2(const pmix_proc_t* proc, void* server_object, pmix_info_t info[],
                                size_t ninfo, pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t upcall_finalized(const pmix_proc_t* proc, void* server_object,
                               pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t upcall_abort(const pmix_proc_t* proc, void* server_object, int status,
                           const char msg[], pmix_proc_t procs[], size_t nprocs,
                           pmix_op_cbfunc_t cbfunc, void* cbdata);
pmix_status_t upcall_fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                           size_t ninfo, char* data, size_t ndata, pmix_modex_cbfunc_t cbfunc,
                           void* cbdata);
pmix_status_t upcall_direct_modex(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                                  pmix_modex_cbfunc_t cbfunc, void* cbdata);
// What the adapters share: `up` posted to the running server (false: none);
// whether a call of `upcall` requires a directive outside `known` (said in
// the debug log), which the adapter then refuses with PMIX_ERR_NOT_SUPPORTED.
bool post_upcall(PmixServer::Upcall up);
bool refuses_directives(const char* upcall, const pmix_info_t info[], size_t ninfo,
                        std::initializer_list<const char*> known);
// The server the upcalls post to (libpmix's upcalls carry no pointer of
// ours: one server per process); nullptr: none, and they are refused.
void set_upcall_target(PmixServer* server);
PmixServer* upcall_target();
// PMIx_server_dmodex_request's completion: `cbdata` is the LocalModex
// Upcall (released here), posted back with libpmix's answer.
void local_modex_done(pmix_status_t status, char* data, size_t size, void* cbdata);

}  // namespace ddplaunch

#endif
