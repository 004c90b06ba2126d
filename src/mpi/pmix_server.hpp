// PmixServer: this node's PMIx server, so that its workers' MPI_Init (Open
// MPI's, MPICH's built with PMIx) finds the job ddplaunch started. It is the
// reference implementation's server library (libpmix, loaded at run time, so
// the launcher still needs only libc); this class is its host. libpmix calls
// the host on its own thread: each call becomes one typed message there
// (mpi/pmix_upcalls.hpp), queued, and the queue's eventfd wakes the main
// thread, which handles it by family in handle_upcalls(): the workers'
// events, fences and direct modex (pmix_events.cpp, pmix_fence.cpp,
// pmix_direct_modex.cpp, each with its C adapter). Fences across nodes go
// through the job's store (mpi/fence.hpp). One per process (libpmix
// is a process-wide library). Thread-safe where libpmix calls it; otherwise
// the main thread's.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mpi/dmodex.hpp"
#include "mpi/fence.hpp"
#include "mpi/hwloc_topology.hpp"
#include "mpi/mpi_host.hpp"
#include "mpi/pmix_env_cache.hpp"
#include "mpi/pmix_relay.hpp"
#include "mpi/tree_fence.hpp"
#include "posix/fd.hpp"
#include "store/connection.hpp"

namespace ddplaunch {

// libpmix's upcalls as typed messages (mpi/pmix_upcalls.hpp).
struct FenceCall;
struct DmodexCall;
struct ModexDone;

class PmixServer : public MpiHost {
 public:
  struct Options {
    std::string tmpdir;           // its files: this node's job directory
    bool cache_topology = false;  // the machine's topology from this user's cache
    // Where setup_fork's environment is kept for the next launch
    // (mpi/pmix_env_cache.hpp); empty: it is not kept.
    std::string env_fingerprint;
    // That environment, kept by an earlier launch: the server starts only
    // when a worker first connects (through the relay); without it, at once.
    std::optional<EnvVars> env_template;
  };
  // Starts the server on a thread of its own, or (with an env_template)
  // only its relay, the server itself once a worker connects. Its files go
  // under `tmpdir`. libpmix's start (its plugins, hwloc's view of the
  // machine) overlaps the launcher's own until the first start_round()
  // waits for it. Call once signals are blocked (the threads inherit the
  // mask) and no PMIx client runs in this process. With `cache_topology`,
  // the machine's topology comes from this user's cache when it fits
  // (mpi/topology_cache), and a discovered one is cached.
  static std::unique_ptr<PmixServer> start(Options options);
  // For unit tests of the upcall families: a server without libpmix, its
  // round `job` taken as registered. The upcalls' table
  // (pmix_upcall_module(), mpi/pmix_upcalls.hpp) posts to it as libpmix's
  // thread would, and handle_upcalls() carries them out. nullptr while
  // another server lives (one per process).
  static std::unique_ptr<PmixServer> for_tests(const PmixJob& job);
  ~PmixServer() override;
  PmixServer(const PmixServer&) = delete;
  PmixServer& operator=(const PmixServer&) = delete;

  // The job's store, for fences across nodes (none: a one-node job). Must
  // outlive this object, or be detached with nullptr first. This node's
  // rank comes with each round (start_round's job), once rendezvous has
  // assigned it.
  // `tree`: this agent's links in the tree of agents, which fences among
  // every node of a round travel (mpi/tree_fence.hpp); null: those go
  // through the job's store too. Must outlive this object as well.
  void attach_store(StoreConnection* connection, TreeLinks* tree = nullptr);
  // Readable when handle_upcalls() has something to do.
  int event_fd() const { return m_wake.get(); }
  // Readable when pump_relay() has something to do (-1: no relay).
  int relay_fd() const { return m_relay ? m_relay->fd() : -1; }
  void pump_relay() { m_relay->pump(); }
  // Whether libpmix was started (a lazy server: once a worker connected).
  bool started() const { return m_started; }

  // Waits for the server's start; without one (libpmix missing, or it
  // would not start: said once in the debug log) every worker gets nothing.
  // A lazy server not started yet gives the workers the kept environment,
  // pointing at the relay, and registers the round when it starts.
  MpiRoundEnv start_round(const PmixJob& job) override;
  std::vector<MpiEvent> handle_upcalls() override;

  // --- libpmix's thread: queue an upcall and wake the main thread ----------
  struct Upcall;
  void post(std::unique_ptr<Upcall> upcall);

 private:
  explicit PmixServer(Options options);
  void begin();  // starts libpmix on its thread
  bool ready();  // waits for the start; true if the server runs
  // Registers `job` with libpmix (forgetting the previous round's) and
  // returns what setup_fork gives its workers.
  MpiRoundEnv register_round(const PmixJob& job);
  // libpmix is up (a lazy server): the round so far is registered, the
  // relay is pointed at it, and the kept environment checked.
  void on_started();
  void keep_environment(const MpiRoundEnv& env);
  PmixRunNames run_names(const std::string& uri, const std::string& nspace) const;
  // The fence and direct modex families (pmix_fence.cpp, pmix_direct_modex.cpp).
  void fence(FenceCall& call);
  void direct_modex(DmodexCall& call);
  // Hands libpmix a fence's or a direct modex's data (for the round still
  // current: libpmix forgot a past round's calls with its namespace);
  // `timed_out`: not ok because its PMIX_TIMEOUT passed (PMIX_ERR_TIMEOUT).
  void complete(const ModexDone& done, const std::string& nspace, bool ok, std::string data,
                bool timed_out = false);
  void serve_direct_modex();

  Options m_options;
  posix::Fd m_wake;                    // eventfd
  std::unique_ptr<PmixRelay> m_relay;  // a lazy server's workers' address
  bool m_started = false;              // begin() was called
  bool m_kept = false;                 // the environment was kept (or found unchanged)
  bool m_serving = false;              // a lazy server registered its round: the relay leads to it
  std::thread m_starting;
  bool m_running = false;                     // set by m_starting; read after it is joined
  std::string m_why;                          // why it does not run
  std::unique_ptr<HwlocTopology> m_topology;  // set by m_starting; outlives libpmix's use
  std::string m_topology_why;                 // why there is none
  std::mutex m_mutex;
  std::vector<std::unique_ptr<Upcall>> m_queue;  // guarded by m_mutex
  // The main thread's.
  std::optional<PmixJob> m_job;
  std::string m_registered;    // the namespace libpmix holds
  std::string m_deregistered;  // the one before
  std::unique_ptr<FenceExchange> m_fences;
  std::unique_ptr<TreeFence> m_tree_fences;  // with a tree: fences among every node
  std::unique_ptr<DirectModex> m_dmodex;
};

}  // namespace ddplaunch
