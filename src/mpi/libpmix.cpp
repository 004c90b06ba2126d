#include "mpi/libpmix.hpp"

#if DDPLAUNCH_HAVE_PMIX

#include <mutex>

#include "posix/library.hpp"

namespace ddplaunch {

namespace {

bool bind_libpmix(Libpmix& api, std::string& why) {
  api.handle = posix::open_libpmix(why);
  auto sym = [&api, &why](auto& fn, const char* name) {
    return posix::load_symbol(api.handle, fn, name, why);
  };
  return api.handle != nullptr && sym(api.server_init, "PMIx_server_init") &&
         sym(api.server_finalize, "PMIx_server_finalize") &&
         sym(api.register_nspace, "PMIx_server_register_nspace") &&
         sym(api.deregister_nspace, "PMIx_server_deregister_nspace") &&
         sym(api.register_client, "PMIx_server_register_client") &&
         sym(api.setup_fork, "PMIx_server_setup_fork") &&
         sym(api.dmodex_request, "PMIx_server_dmodex_request") &&
         sym(api.generate_regex, "PMIx_generate_regex") &&
         sym(api.generate_ppn, "PMIx_generate_ppn") && sym(api.init, "PMIx_Init") &&
         sym(api.finalize, "PMIx_Finalize") && sym(api.put, "PMIx_Put") &&
         sym(api.commit, "PMIx_Commit") && sym(api.fence, "PMIx_Fence") &&
         sym(api.get, "PMIx_Get") && sym(api.error_string, "PMIx_Error_string");
}

}  // namespace

std::string Libpmix::error_text(pmix_status_t rc) const {
  return error_string != nullptr ? error_string(rc) : std::to_string(rc);
}

const Libpmix* load_libpmix(std::string& why) {
  static Libpmix api;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!bind_libpmix(api, failure)) {
      api = Libpmix{};
    }
  });
  if (api.handle == nullptr) {
    why = failure;
    return nullptr;
  }
  return &api;
}

}  // namespace ddplaunch

#endif
