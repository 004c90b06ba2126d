// Libpmix: the calls this launcher makes into libpmix (Debian's libpmix2),
// for its own PMIx server (mpi/pmix_server) and as a PMIx client of an
// outer mpirun (mpi/pmix_exchange): one table, loaded at the first use
// (posix/library), never closed. Only where the build found libpmix's
// headers (DDPLAUNCH_HAVE_PMIX). Thread-safe: the first load is made once.
#pragma once

#if DDPLAUNCH_HAVE_PMIX

#include <pmix.h>
#include <pmix_server.h>

#include <string>

namespace ddplaunch {

struct Libpmix {
  void* handle = nullptr;
  // The server's.
  decltype(&PMIx_server_init) server_init = nullptr;
  decltype(&PMIx_server_finalize) server_finalize = nullptr;
  decltype(&PMIx_server_register_nspace) register_nspace = nullptr;
  decltype(&PMIx_server_deregister_nspace) deregister_nspace = nullptr;
  decltype(&PMIx_server_register_client) register_client = nullptr;
  decltype(&PMIx_server_setup_fork) setup_fork = nullptr;
  decltype(&PMIx_server_dmodex_request) dmodex_request = nullptr;
  decltype(&PMIx_generate_regex) generate_regex = nullptr;
  decltype(&PMIx_generate_ppn) generate_ppn = nullptr;
  // A client's.
  decltype(&PMIx_Init) init = nullptr;
  decltype(&PMIx_Finalize) finalize = nullptr;
  decltype(&PMIx_Put) put = nullptr;
  decltype(&PMIx_Commit) commit = nullptr;
  decltype(&PMIx_Fence) fence = nullptr;
  decltype(&PMIx_Get) get = nullptr;
  // Both.
  decltype(&PMIx_Error_string) error_string = nullptr;

  // "PMIX_ERR_TIMEOUT" for a status (its number where libpmix is not loaded).
  std::string error_text(pmix_status_t rc) const;
};

// The table, loaded on the first call; nullptr (every time) with `why` set
// ("cannot load libpmix.so.2 (install Debian's libpmix2): ...", "libpmix has
// no PMIx_server_init") when it cannot be.
const Libpmix* load_libpmix(std::string& why);

}  // namespace ddplaunch

#endif
