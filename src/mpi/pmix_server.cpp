#include "mpi/pmix_server.hpp"

#include <dlfcn.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <variant>

#include "config/integer.hpp"
#include "log.hpp"
#include "mpi/hwloc_topology.hpp"
#include "mpi/libpmix.hpp"
#include "mpi/pmix_info.hpp"
#include "mpi/pmix_upcalls.hpp"
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
struct FenceCall {};
struct DmodexCall {};

PmixServer::PmixServer(Options options) : m_options(std::move(options)) {}
PmixServer::~PmixServer() = default;
std::unique_ptr<PmixServer> PmixServer::start(Options) {
  log::debug("no PMIx server for the workers: this ddplaunch was built without libpmix-dev");
  return nullptr;
}
std::unique_ptr<PmixServer> PmixServer::for_tests(const PmixJob&) {
  return nullptr;
}
bool PmixServer::ready() {
  return false;
}
void PmixServer::attach_store(StoreConnection*) {}
MpiRoundEnv PmixServer::start_round(const PmixJob&) {
  return {};
}
std::vector<MpiEvent> PmixServer::handle_upcalls() {
  return {};
}
void PmixServer::post(std::unique_ptr<Upcall>) {}
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

const Libpmix* g_api = nullptr;  // loaded by the first server
// The server's own name; its rank is the launcher's pid (as libpmix's
// default "pmix-server.<pid>").
constexpr const char* k_server_nspace = "ddplaunch-server";
std::string error_text(pmix_status_t rc) {
  return g_api != nullptr ? g_api->error_text(rc) : std::to_string(rc);
}

}  // namespace

PmixServer::PmixServer(Options options)
    : m_options(std::move(options)), m_wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!m_wake) {
    throw posix::errno_error("eventfd for the PMIx server");
  }
}

std::unique_ptr<PmixServer> PmixServer::start(Options options) {
  if (upcall_target() != nullptr) {
    return nullptr;  // libpmix holds one server per process
  }
  std::unique_ptr<PmixServer> server(new PmixServer(std::move(options)));
  set_upcall_target(server.get());
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
  if (m_options.cache_topology && (g_api != nullptr || (g_api = load_libpmix(m_why)) != nullptr)) {
    m_topology = HwlocTopology::prepare(g_api->handle, m_topology_why);
  }
  const bool lazy = m_relay != nullptr;
  m_starting = std::thread([this, lazy, tmpdir = m_options.tmpdir] {
    auto started = [this, lazy] {
      if (lazy) {
        post(std::make_unique<Upcall>(Upcall{ServerStarted{}}));
      }
    };
    if (g_api == nullptr && (g_api = load_libpmix(m_why)) == nullptr) {
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
    const pmix_status_t rc = g_api->server_init(pmix_upcall_module(), info.data(), info.size());
    if (rc != PMIX_SUCCESS) {
      m_why = "PMIx_server_init: " + error_text(rc);
      m_topology.reset();
    } else {
      m_running = true;
    }
    started();
  });
}

std::unique_ptr<PmixServer> PmixServer::for_tests(const PmixJob& job) {
  if (upcall_target() != nullptr) {
    return nullptr;
  }
  std::unique_ptr<PmixServer> server(new PmixServer(Options{}));
  set_upcall_target(server.get());
  server->m_started = true;  // its queue is read; m_running stays false: no libpmix to finalize
  server->m_job = job;
  server->m_registered = job.nspace;
  return server;
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
    set_upcall_target(nullptr);
    return;
  }
  const pmix_status_t rc = g_api->server_finalize();
  m_topology.reset();  // libpmix used it until now
  set_upcall_target(nullptr);
  if (rc != PMIX_SUCCESS) {
    log::debug("PMIx_server_finalize: {}", error_text(rc));
  }
  // Fences libpmix never heard the end of die with it.
}

void PmixServer::attach_store(StoreConnection* connection, TreeLinks* tree) {
  m_tree_fences.reset();
  m_fences.reset();
  m_dmodex.reset();
  if (connection != nullptr) {
    m_fences = std::make_unique<FenceExchange>(*connection);
    m_dmodex = std::make_unique<DirectModex>(*connection);
    if (tree != nullptr) {
      m_tree_fences = std::make_unique<TreeFence>(*tree);
    }
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
    if (m_tree_fences) {
      m_tree_fences->abandon();
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
  if (g_api == nullptr || ::dladdr(reinterpret_cast<void*>(g_api->server_init), &info) == 0 ||
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

std::vector<MpiEvent> PmixServer::handle_upcalls() {
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
  const auto current = [this](const std::string& nspace) {
    return m_job && nspace == m_job->nspace;
  };
  for (auto& up : queue) {
    std::visit(Overloaded{
                   [this](ServerStarted&) { on_started(); },
                   [](LocalModex& local) { local.answer(local.ok, std::move(local.data)); },
                   [&](WorkerSaid& said) {
                     if (!current(said.nspace)) {
                       return;  // a past round's
                     }
                     if (said.event.kind == MpiEvent::Kind::k_connected) {
                       serve_direct_modex();
                     }
                     events.push_back(std::move(said.event));
                   },
                   [&](FenceCall& call) {
                     if (current(call.nspace)) {
                       fence(call);
                     } else {
                       complete(call.done, call.nspace, false, {});
                     }
                   },
                   [&](DmodexCall& call) {
                     if (current(call.nspace)) {
                       direct_modex(call);
                     } else {
                       complete(call.done, call.nspace, false, {});
                     }
                   },
               },
               up->message);
  }
  return events;
}

#endif

}  // namespace ddplaunch
