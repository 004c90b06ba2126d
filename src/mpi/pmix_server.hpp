// PmixServer: this node's PMIx server, so that its workers' MPI_Init (Open
// MPI's, MPICH's built with PMIx) finds the job ddplaunch started. It is the
// reference implementation's server library (libpmix, loaded at run time, so
// the launcher still needs only libc); this class is its host. libpmix calls
// the host on its own thread: each call is queued and the queue's eventfd
// wakes the main thread, which answers it in take_events(). Fences across
// nodes go through the job's store (mpi/fence.hpp). One per process (libpmix
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
#include "posix/fd.hpp"
#include "store/connection.hpp"

namespace ddplaunch {

class PmixServer : public MpiHost {
 public:
  // Starts the server, its files under `tmpdir` (this node's job directory),
  // on a thread of its own: libpmix's start (its plugins, hwloc's view of
  // the machine: ~15 ms) overlaps the launcher's own until the first
  // start_round() waits for it. Call once signals are blocked (the threads
  // inherit the mask) and no PMIx client runs in this process.
  // With `cache_topology`, the machine's topology comes from this user's
  // cache when it fits (mpi/topology_cache), and a discovered one is cached.
  static std::unique_ptr<PmixServer> start(const std::string& tmpdir, bool cache_topology);
  ~PmixServer() override;
  PmixServer(const PmixServer&) = delete;
  PmixServer& operator=(const PmixServer&) = delete;

  // The job's store, for fences across nodes (none: a one-node job). Must
  // outlive this object, or be detached with nullptr first.
  void attach_store(StoreConnection* connection, int node_rank);
  // Readable when take_events() has something to do.
  int event_fd() const { return m_wake.get(); }

  // Waits for the server's start; without one (libpmix missing, or it
  // would not start: said once in the debug log) every worker gets nothing.
  MpiRoundEnv start_round(const PmixJob& job) override;
  std::vector<MpiEvent> take_events() override;

  // --- libpmix's thread: queue an upcall and wake the main thread ----------
  struct Upcall;
  void post(std::unique_ptr<Upcall> upcall);

 private:
  PmixServer();
  bool ready();  // waits for the start; true if the server runs
  void fence(Upcall& call);
  void direct_modex(Upcall& call);
  // Hands libpmix a fence's or a direct modex's data (for the round still
  // current: libpmix forgot a past round's calls with its namespace).
  void complete(Upcall& call, bool ok, std::string data);
  void serve_direct_modex();

  posix::Fd m_wake;  // eventfd
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
  std::unique_ptr<DirectModex> m_dmodex;
};

}  // namespace ddplaunch
