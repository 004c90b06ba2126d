#include "mpi/pmix_server.hpp"

#include <dlfcn.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>

#include "config/integer.hpp"
#include "log.hpp"
#include "mpi/hwloc_topology.hpp"
#include "mpi/topology_cache.hpp"
#include "posix/error.hpp"
#include "posix/library.hpp"

#if DDPLAUNCH_HAVE_PMIX
#include <pmix.h>
#include <pmix_server.h>
#endif

namespace ddplaunch {

#if !DDPLAUNCH_HAVE_PMIX

struct PmixServer::Upcall {};

PmixServer::PmixServer(Options options) : m_options(std::move(options)) {}
PmixServer::~PmixServer() = default;
std::unique_ptr<PmixServer> PmixServer::start(Options) {
  log::debug("no PMIx server for the workers: this ddplaunch was built without libpmix-dev");
  return nullptr;
}
bool PmixServer::ready() {
  return false;
}
void PmixServer::attach_store(StoreConnection*) {}
MpiRoundEnv PmixServer::start_round(const PmixJob&) {
  return {};
}
std::vector<MpiEvent> PmixServer::take_events() {
  return {};
}
void PmixServer::post(std::unique_ptr<Upcall>) {}
void PmixServer::fence(Upcall&) {}
void PmixServer::direct_modex(Upcall&) {}
void PmixServer::complete(Upcall&, bool, std::string) {}
void PmixServer::serve_direct_modex() {}
void PmixServer::begin() {}
MpiRoundEnv PmixServer::register_round(const PmixJob&) {
  return {};
}
void PmixServer::on_started() {}
void PmixServer::keep_environment(const MpiRoundEnv&) {}
PmixRunNames PmixServer::run_names(const std::string&, const std::string&) const {
  return {};
}

#else

namespace {

// The server calls, loaded from Debian's libpmix2.
struct ServerApi {
  void* handle = nullptr;
  decltype(&PMIx_server_init) init = nullptr;
  decltype(&PMIx_server_finalize) finalize = nullptr;
  decltype(&PMIx_server_register_nspace) register_nspace = nullptr;
  decltype(&PMIx_server_deregister_nspace) deregister_nspace = nullptr;
  decltype(&PMIx_server_register_client) register_client = nullptr;
  decltype(&PMIx_server_setup_fork) setup_fork = nullptr;
  decltype(&PMIx_server_dmodex_request) dmodex_request = nullptr;
  decltype(&PMIx_generate_regex) generate_regex = nullptr;
  decltype(&PMIx_generate_ppn) generate_ppn = nullptr;
  decltype(&PMIx_Error_string) error_string = nullptr;

  bool load(std::string& why) {
    handle = posix::open_libpmix(why);
    auto sym = [this, &why](auto& fn, const char* name) {
      return posix::load_symbol(handle, fn, name, why);
    };
    return handle != nullptr && sym(init, "PMIx_server_init") &&
           sym(finalize, "PMIx_server_finalize") &&
           sym(register_nspace, "PMIx_server_register_nspace") &&
           sym(deregister_nspace, "PMIx_server_deregister_nspace") &&
           sym(register_client, "PMIx_server_register_client") &&
           sym(setup_fork, "PMIx_server_setup_fork") &&
           sym(dmodex_request, "PMIx_server_dmodex_request") &&
           sym(generate_regex, "PMIx_generate_regex") && sym(generate_ppn, "PMIx_generate_ppn") &&
           sym(error_string, "PMIx_Error_string");
  }
};

ServerApi g_api;
// The server's own name; its rank is the launcher's pid (as libpmix's
// default "pmix-server.<pid>").
constexpr const char* k_server_nspace = "ddplaunch-server";
// libpmix's upcalls carry no pointer of ours: the one server of this process.
std::atomic<PmixServer*> g_server{nullptr};

// pmix_info_t arrays built by hand (PMIx's macros call into the library,
// which is not linked): every string they point at is owned here, and each
// array stays put while libpmix reads it.
class InfoList {
 public:
  void u32(const char* key, uint32_t v) { add(key, PMIX_UINT32).data.uint32 = v; }
  void rank(const char* key, uint32_t v) { add(key, PMIX_PROC_RANK).data.rank = v; }
  void flag(const char* key, bool v) { add(key, PMIX_BOOL).data.flag = v; }
  // `topology` must outlive the list's use.
  void topology(const char* key, pmix_topology_t* topology) {
    add(key, PMIX_TOPO).data.topo = topology;
  }
  void str(const char* key, std::string v) {
    m_strings.push_back(std::move(v));
    add(key, PMIX_STRING).data.string = m_strings.back().data();
  }
  pmix_info_t* data() { return m_info.empty() ? nullptr : m_info.data(); }
  size_t size() const { return m_info.size(); }

 private:
  pmix_value_t& add(const char* key, pmix_data_type_t type) {
    pmix_info_t info;
    std::memset(&info, 0, sizeof info);
    std::strncpy(info.key, key, PMIX_MAX_KEYLEN);
    info.value.type = type;
    m_info.push_back(info);
    return m_info.back().value;
  }
  std::vector<pmix_info_t> m_info;  // data() is read only once the list is complete
  std::deque<std::string> m_strings;
};

std::string error_text(pmix_status_t rc) {
  return g_api.error_string != nullptr ? g_api.error_string(rc) : std::to_string(rc);
}

pmix_proc_t make_proc(const std::string& nspace, uint32_t rank) {
  pmix_proc_t p;
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.nspace, nspace.c_str(), PMIX_MAX_NSLEN);
  p.rank = rank;
  return p;
}

// A string libpmix malloc'd, freed when done with.
struct Malloced {
  char* p = nullptr;
  ~Malloced() { std::free(p); }
};

}  // namespace

struct PmixServer::Upcall {
  enum class Kind {
    k_event,         // a worker's MpiEvent
    k_fence,         // libpmix's fence_nb: the local ranks are all in
    k_dmodex,        // libpmix's direct_modex: a remote rank's data wanted here
    k_dmodex_local,  // libpmix's answer to a remote node's direct modex
    k_started,       // a lazy server's libpmix is up (or failed to start)
  } kind = Kind::k_event;
  std::string nspace;
  MpiEvent event;
  // A fence's participants (rank -1: the whole namespace); a direct modex's
  // one rank.
  std::vector<int> ranks;
  std::string data;  // this node's fence data; a local rank's modex data
  bool ok = true;
  // libpmix's completion (fence, direct modex), or the store's (local).
  pmix_modex_cbfunc_t cbfunc = nullptr;
  void* cbdata = nullptr;
  DirectModex::Reply answer;
};

namespace {

void post_event(const pmix_proc_t* proc, MpiEvent::Kind kind, int status, const char* message) {
  PmixServer* server = g_server.load();
  if (server == nullptr || proc == nullptr) {
    return;
  }
  auto up = std::make_unique<PmixServer::Upcall>();
  up->nspace = proc->nspace;
  up->event.kind = kind;
  up->event.rank = static_cast<int>(proc->rank);
  up->event.status = status;
  up->event.message = message != nullptr ? message : "";
  server->post(std::move(up));
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
  PmixServer* server = g_server.load();
  if (server == nullptr || cbfunc == nullptr) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  auto up = std::make_unique<PmixServer::Upcall>();
  up->kind = PmixServer::Upcall::Kind::k_fence;
  for (size_t i = 0; i < nprocs; ++i) {
    if (up->nspace.empty()) {
      up->nspace = procs[i].nspace;
    }
    up->ranks.push_back(procs[i].rank == PMIX_RANK_WILDCARD ? -1 : static_cast<int>(procs[i].rank));
  }
  bool collect = false;
  for (size_t i = 0; i < ninfo; ++i) {
    if (std::strncmp(info[i].key, PMIX_COLLECT_DATA, PMIX_MAX_KEYLEN) == 0) {
      collect = info[i].value.type != PMIX_BOOL || info[i].value.data.flag;
    }
  }
  if (collect && data != nullptr) {
    up->data.assign(data, ndata);
  }
  up->cbfunc = cbfunc;
  up->cbdata = cbdata;
  server->post(std::move(up));
  return PMIX_SUCCESS;
}

void release_data(void* p) {
  delete static_cast<std::string*>(p);
}

// A local worker wants a remote rank's data, which no fence brought
// (direct modex): the node hosting that rank is asked through the store.
pmix_status_t on_direct_modex(const pmix_proc_t* proc, const pmix_info_t[], size_t,
                              pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  PmixServer* server = g_server.load();
  if (server == nullptr || proc == nullptr || cbfunc == nullptr) {
    return PMIX_ERR_NOT_SUPPORTED;
  }
  auto up = std::make_unique<PmixServer::Upcall>();
  up->kind = PmixServer::Upcall::Kind::k_dmodex;
  up->nspace = proc->nspace;
  up->ranks.push_back(static_cast<int>(proc->rank));
  up->cbfunc = cbfunc;
  up->cbdata = cbdata;
  server->post(std::move(up));
  return PMIX_SUCCESS;
}

// libpmix's answer to PMIx_server_dmodex_request (a remote node asked for a
// local rank's data): `cbdata` is the Upcall carrying the store's reply.
void on_local_modex(pmix_status_t status, char* data, size_t size, void* cbdata) {
  std::unique_ptr<PmixServer::Upcall> up(static_cast<PmixServer::Upcall*>(cbdata));
  up->ok = status == PMIX_SUCCESS;
  if (up->ok && data != nullptr) {
    up->data.assign(data, size);
  }
  if (PmixServer* server = g_server.load(); server != nullptr) {
    server->post(std::move(up));
  }
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

PmixServer::PmixServer(Options options)
    : m_options(std::move(options)), m_wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!m_wake) {
    throw posix::errno_error("eventfd for the PMIx server");
  }
}

std::unique_ptr<PmixServer> PmixServer::start(Options options) {
  if (g_server.load() != nullptr) {
    return nullptr;  // libpmix holds one server per process
  }
  std::unique_ptr<PmixServer> server(new PmixServer(std::move(options)));
  g_server = server.get();
  if (server->m_options.env_template) {
    try {
      server->m_relay = std::make_unique<PmixRelay>();
      server->m_relay->on_first_client([s = server.get()] { s->begin(); });
      log::debug("the PMIx server starts when a worker first connects (its relay: port {})",
                 server->m_relay->port());
      return server;
    } catch (const std::system_error& e) {
      log::debug("no relay for the PMIx server ({}): it starts now", e.what());
      server->m_relay.reset();
      server->m_options.env_template.reset();
    }
  }
  server->begin();
  return server;
}

void PmixServer::begin() {
  if (m_started) {
    return;
  }
  m_started = true;
  // The machine's topology from this user's cache when it still fits the
  // machine (~0.3 ms), where hwloc's discovery takes ~13 ms: read here,
  // before the server's thread exists (HwlocTopology::prepare).
  if (m_options.cache_topology && (g_api.handle != nullptr || g_api.load(m_why))) {
    m_topology = HwlocTopology::prepare(g_api.handle, m_topology_why);
  }
  const bool lazy = m_relay != nullptr;
  m_starting = std::thread([this, lazy, tmpdir = m_options.tmpdir] {
    auto started = [this, lazy] {
      if (lazy) {
        auto up = std::make_unique<Upcall>();
        up->kind = Upcall::Kind::k_started;
        post(std::move(up));
      }
    };
    if (g_api.handle == nullptr && !g_api.load(m_why)) {
      started();
      return;
    }
    InfoList info;
    pmix_topology_t topology{const_cast<char*>("hwloc"), nullptr};
    if (m_topology && !m_topology->obtain(m_topology_why)) {
      m_topology.reset();
    }
    if (m_topology) {
      topology.topology = m_topology->get();
      info.topology(PMIX_TOPOLOGY2, &topology);
    }
    if (!tmpdir.empty()) {
      info.str(PMIX_SERVER_TMPDIR, tmpdir);
      info.str(PMIX_SYSTEM_TMPDIR, tmpdir);
    }
    // Its own name, as the relay's address spells it to the workers.
    info.str(PMIX_SERVER_NSPACE, k_server_nspace);
    info.rank(PMIX_SERVER_RANK, static_cast<uint32_t>(::getpid()));
    // The machine's topology, read once here, is handed to every client
    // (shared memory): N ranks do not each read it (PCI included) again.
    info.flag(PMIX_SERVER_SHARE_TOPOLOGY, true);
    const pmix_status_t rc = g_api.init(&g_module, info.data(), info.size());
    if (rc != PMIX_SUCCESS) {
      m_why = "PMIx_server_init: " + error_text(rc);
      m_topology.reset();
    } else {
      m_running = true;
    }
    started();
  });
}

bool PmixServer::ready() {
  if (m_starting.joinable()) {
    m_starting.join();
    if (!m_running) {
      log::debug("no PMIx server for the workers ({}): MPI programs will not initialise", m_why);
    } else if (!m_topology_why.empty()) {
      log::debug("no cached topology for the PMIx server ({}): libpmix discovered it",
                 m_topology_why);
    } else if (m_topology) {
      // Discovered this time: cached for the next launch. Here, not on the
      // server's thread: the files ddplaunch opens stay on the main thread
      // (ThreadSanitizer's model of fd numbers reused across threads).
      m_topology->remember();
      log::debug("the PMIx server's topology: {}", m_topology->describe());
    }
  }
  return m_running;
}

PmixServer::~PmixServer() {
  if (!ready()) {
    g_server = nullptr;
    return;
  }
  const pmix_status_t rc = g_api.finalize();
  m_topology.reset();  // libpmix used it until now
  g_server = nullptr;
  if (rc != PMIX_SUCCESS) {
    log::debug("PMIx_server_finalize: {}", error_text(rc));
  }
  // Fences libpmix never heard the end of die with it.
}

void PmixServer::attach_store(StoreConnection* connection) {
  m_fences.reset();
  m_dmodex.reset();
  if (connection != nullptr) {
    m_fences = std::make_unique<FenceExchange>(*connection);
    m_dmodex = std::make_unique<DirectModex>(*connection);
  }
}

void PmixServer::post(std::unique_ptr<Upcall> upcall) {
  {
    std::lock_guard lock(m_mutex);
    m_queue.push_back(std::move(upcall));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(m_wake.get(), &one, sizeof one);
}

MpiRoundEnv PmixServer::start_round(const PmixJob& job) {
  if (m_relay && !m_serving) {
    // libpmix is not up yet: the kept environment, pointing at the relay;
    // the round is registered once the first worker connects (on_started).
    if (m_fences) {
      m_fences->abandon();
      m_dmodex->stop_serving();
    }
    m_job = job;
    const std::string uri = std::string(k_server_nspace) + "." + std::to_string(::getpid()) +
                            ";tcp4://127.0.0.1:" + std::to_string(m_relay->port());
    MpiRoundEnv out;
    out.rank_variable = "PMIX_RANK";
    out.shared = pmix_env_for_run(*m_options.env_template, run_names(uri, job.nspace));
    return out;
  }
  MpiRoundEnv out = register_round(job);
  if (!m_kept && !out.shared.empty()) {
    keep_environment(out);
  }
  return out;
}

PmixRunNames PmixServer::run_names(const std::string& uri, const std::string& nspace) const {
  return {uri, nspace, m_options.tmpdir, std::to_string(::getpid())};
}

namespace {

// The server's address in setup_fork's environment ("" when none).
std::string server_uri(const EnvVars& env) {
  for (const auto& [name, value] : env) {
    if (name.rfind("PMIX_SERVER_URI", 0) == 0) {
      return value;
    }
  }
  return "";
}

// The host and port of a PMIx URI ("ns.rank;tcp4://127.0.0.1:5000",
// "...;tcp6://[::1]:5000"); port 0 when it has none.
std::pair<std::string, int> uri_address(const std::string& uri) {
  const size_t scheme = uri.find("://");
  const size_t colon = uri.rfind(':');
  if (scheme == std::string::npos || colon == std::string::npos || colon < scheme + 3) {
    return {"", 0};
  }
  std::string host = uri.substr(scheme + 3, colon - scheme - 3);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const auto port = leading_integer(std::string_view(uri).substr(colon + 1)).value_or(0);
  return {host, port > 0 && port < 65536 ? static_cast<int>(port) : 0};
}

// Where libpmix was loaded from (its file keys the kept environment).
std::string library_path() {
  Dl_info info{};
  if (g_api.init == nullptr || ::dladdr(reinterpret_cast<void*>(g_api.init), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  return info.dli_fname;
}

}  // namespace

void PmixServer::keep_environment(const MpiRoundEnv& env) {
  m_kept = true;
  if (m_options.env_fingerprint.empty() || !m_job) {
    return;
  }
  const auto tmpl = pmix_env_template(env.shared, run_names(server_uri(env.shared), m_job->nspace));
  if (!tmpl) {
    log::debug("the PMIx server's environment cannot be kept: the server starts first next time");
    return;
  }
  if (m_options.env_template == tmpl) {
    return;
  }
  if (m_options.env_template) {
    log::warn(
        "the PMIx server's environment changed since it was kept in {}: this round's workers may "
        "fail in MPI_Init; the next launch gives them the new one",
        pmix_env_cache_path());
  }
  const std::string library = library_path();
  if (library.empty() ||
      !write_pmix_env_cache(pmix_env_cache_path(), m_options.env_fingerprint, library, *tmpl)) {
    log::debug("the PMIx server's environment was not kept in {}", pmix_env_cache_path());
  }
}

void PmixServer::on_started() {
  if (!ready()) {
    log::warn("no PMIx server for the workers ({}): MPI programs will not initialise", m_why);
    m_relay->refuse_clients();
    return;
  }
  if (!m_job) {
    m_relay->refuse_clients();
    return;
  }
  MpiRoundEnv env;
  try {
    const PmixJob job = *m_job;  // register_round sets m_job
    env = register_round(job);
  } catch (const std::exception& e) {
    log::warn("the PMIx server refused this job ({}): MPI programs will not initialise", e.what());
    m_relay->refuse_clients();
    return;
  }
  m_serving = true;
  keep_environment(env);
  const auto [host, port] = uri_address(server_uri(env.shared));
  if (port == 0) {
    log::warn(
        "the PMIx server gave no address its workers can reach: MPI programs will not initialise");
    m_relay->refuse_clients();
    return;
  }
  log::debug("the PMIx server started for the first worker that connected; relayed to {}:{}", host,
             port);
  m_relay->set_server(host, port);
}

MpiRoundEnv PmixServer::register_round(const PmixJob& job) {
  if (!ready()) {
    return {};
  }
  if (m_fences) {
    m_fences->abandon();
    m_dmodex->stop_serving();
  }

  if (!m_registered.empty()) {
    // The previous round's namespace: its clients are gone.
    g_api.deregister_nspace(m_registered.c_str(), nullptr, nullptr);
    m_deregistered = m_registered;
    m_registered.clear();
  }
  m_job = job;
  Malloced node_map;
  Malloced proc_map;
  if (g_api.generate_regex(job.node_list().c_str(), &node_map.p) != PMIX_SUCCESS ||
      g_api.generate_ppn(job.proc_list().c_str(), &proc_map.p) != PMIX_SUCCESS) {
    throw std::runtime_error("PMIx could not encode the job's node and process maps");
  }
  const auto world = static_cast<uint32_t>(job.world_size);
  const auto local = static_cast<uint32_t>(job.local_size());
  InfoList info;
  info.u32(PMIX_UNIV_SIZE, world);
  info.u32(PMIX_JOB_SIZE, world);
  info.u32(PMIX_MAX_PROCS, world);
  info.u32(PMIX_APP_SIZE, world);
  info.u32(PMIX_APPNUM, 0);
  info.rank(PMIX_APPLDR, 0);
  info.flag(PMIX_SPAWNED, false);
  info.str(PMIX_JOBID, job.nspace);
  info.u32(PMIX_NUM_NODES, static_cast<uint32_t>(job.nnodes()));
  info.str(PMIX_NODE_MAP, node_map.p);
  info.str(PMIX_PROC_MAP, proc_map.p);
  info.u32(PMIX_LOCAL_SIZE, local);
  info.u32(PMIX_NODE_SIZE, local);
  info.str(PMIX_LOCAL_PEERS, job.local_peers());
  info.rank(PMIX_LOCALLDR, static_cast<uint32_t>(job.local_first()));
  info.u32(PMIX_NODEID, static_cast<uint32_t>(job.node_rank));
  info.str(PMIX_HOSTNAME, job.hosts.at(static_cast<size_t>(job.node_rank)));
  // No PMIX_PROC_DATA per rank: libpmix derives each local rank's local and
  // node rank from the maps above, and 4,096 of them would hold 20 MB.
  pmix_status_t rc = g_api.register_nspace(job.nspace.c_str(), static_cast<int>(local), info.data(),
                                           info.size(), nullptr, nullptr);
  if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED) {
    throw std::runtime_error("PMIx_server_register_nspace: " + error_text(rc));
  }
  m_registered = job.nspace;
  // Every local rank, registered at once; their completions are awaited together.
  struct Latch {
    std::mutex mutex;
    std::condition_variable cv;
    uint32_t left = 0;
    pmix_status_t status = PMIX_SUCCESS;
  } latch;
  auto registered = [](pmix_status_t status, void* cbdata) {
    auto* l = static_cast<Latch*>(cbdata);
    std::lock_guard lock(l->mutex);
    if (status != PMIX_SUCCESS) {
      l->status = status;
    }
    if (--l->left == 0) {
      l->cv.notify_all();
    }
  };
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  for (uint32_t i = 0; i < local; ++i) {
    const pmix_proc_t proc = make_proc(job.nspace, static_cast<uint32_t>(job.local_first()) + i);
    {
      std::lock_guard lock(latch.mutex);
      ++latch.left;  // before the call: its completion may come at once
    }
    rc = g_api.register_client(&proc, uid, gid, nullptr, registered, &latch);
    if (rc != PMIX_SUCCESS) {
      std::lock_guard lock(latch.mutex);
      --latch.left;  // it will not call back
      if (rc != PMIX_OPERATION_SUCCEEDED) {
        latch.status = rc;
        break;
      }
    }
  }
  {
    std::unique_lock lock(latch.mutex);
    latch.cv.wait(lock, [&latch] { return latch.left == 0; });
  }
  if (latch.status != PMIX_SUCCESS) {
    throw std::runtime_error("PMIx_server_register_client: " + error_text(latch.status));
  }
  // What setup_fork gives every local rank is the same but for its rank:
  // asked for the first rank only.
  MpiRoundEnv out;
  out.rank_variable = "PMIX_RANK";
  const pmix_proc_t first = make_proc(job.nspace, static_cast<uint32_t>(job.local_first()));
  char** env = nullptr;
  rc = g_api.setup_fork(&first, &env);
  if (rc != PMIX_SUCCESS) {
    throw std::runtime_error("PMIx_server_setup_fork: " + error_text(rc));
  }
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    std::free(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos && entry.compare(0, eq, out.rank_variable) != 0) {
      out.shared.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    }
  }
  std::free(env);
  return out;
}

std::vector<MpiEvent> PmixServer::take_events() {
  if (!m_started) {
    return {};  // no libpmix thread yet: nothing was queued (a worker's end costs no read)
  }
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = ::read(m_wake.get(), &count, sizeof count);
  std::vector<std::unique_ptr<Upcall> > queue;
  {
    std::lock_guard lock(m_mutex);
    queue.swap(m_queue);
  }
  std::vector<MpiEvent> events;
  for (auto& up : queue) {
    if (up->kind == Upcall::Kind::k_started) {
      on_started();
      continue;
    }
    if (up->kind == Upcall::Kind::k_dmodex_local) {
      up->answer(up->ok, std::move(up->data));
      continue;
    }
    if (!m_job || up->nspace != m_job->nspace) {
      complete(*up, false, {});  // a past round's, or not a job's
      continue;
    }
    switch (up->kind) {
      case Upcall::Kind::k_fence:
        fence(*up);
        break;
      case Upcall::Kind::k_dmodex:
        direct_modex(*up);
        break;
      default:
        if (up->event.kind == MpiEvent::Kind::k_connected) {
          serve_direct_modex();
        }
        events.push_back(std::move(up->event));
        break;
    }
  }
  return events;
}

void PmixServer::fence(Upcall& call) {
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
    complete(call, only_here, std::move(call.data));
    return;
  }
  log::debug("PMIx fence among {} node(s): {} bytes from this node", nodes.size(),
             call.data.size());
  auto shared = std::make_shared<Upcall>(std::move(call));
  m_fences->enter(
      job.nspace, signature, nodes, job.node_rank, shared->data,
      [this, shared](bool ok, std::string data) { complete(*shared, ok, std::move(data)); });
}

void PmixServer::direct_modex(Upcall& call) {
  const int node = m_job->node_of(call.ranks.at(0));
  if (!m_dmodex || node < 0 || node == m_job->node_rank) {
    complete(call, false, {});  // nobody else to ask
    return;
  }
  auto shared = std::make_shared<Upcall>(std::move(call));
  m_dmodex->request(
      m_job->nspace, m_job->node_rank, node, shared->ranks.at(0),
      [this, shared](bool ok, std::string data) { complete(*shared, ok, std::move(data)); });
}

// Once a local worker joined, this node answers the others' direct modex
// requests for its ranks (a job of programs that never call MPI_Init never
// parks a request on the store for it).
void PmixServer::serve_direct_modex() {
  if (!m_dmodex || !m_job) {
    return;
  }
  m_dmodex->serve(m_job->nspace, m_job->node_rank,
                  [nspace = m_job->nspace](int rank, DirectModex::Reply answer) {
                    auto up = std::make_unique<Upcall>();
                    up->kind = Upcall::Kind::k_dmodex_local;
                    up->answer = std::move(answer);
                    const pmix_proc_t proc = make_proc(nspace, static_cast<uint32_t>(rank));
                    Upcall* raw = up.release();
                    if (g_api.dmodex_request(&proc, on_local_modex, raw) != PMIX_SUCCESS) {
                      std::unique_ptr<Upcall> failed(raw);
                      failed->answer(false, {});
                    }
                  });
}

void PmixServer::complete(Upcall& call, bool ok, std::string data) {
  if (call.cbfunc == nullptr) {
    return;
  }
  if (!m_job || call.nspace != m_job->nspace) {
    // A past round's call was dropped by libpmix with its namespace
    // (start_round deregistered it); any other is refused.
    if (call.nspace != m_deregistered) {
      call.cbfunc(PMIX_ERR_INVALID_NAMESPACE, nullptr, 0, call.cbdata, nullptr, nullptr);
    }
    return;
  }
  if (!ok) {
    call.cbfunc(PMIX_ERROR, nullptr, 0, call.cbdata, nullptr, nullptr);
    return;
  }
  auto owned = std::make_unique<std::string>(std::move(data));
  const char* bytes = owned->data();
  const size_t size = owned->size();
  call.cbfunc(PMIX_SUCCESS, bytes, size, call.cbdata, release_data, owned.release());
}

#endif

}  // namespace ddplaunch
