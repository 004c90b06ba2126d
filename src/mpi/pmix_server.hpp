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
#include <vector>

#include "mpi/fence.hpp"
#include "mpi/mpi_host.hpp"
#include "posix/fd.hpp"
#include "store/connection.hpp"

namespace ddplaunch {

class PmixServer : public MpiHost {
 public:
  // Starts the server, its files under `tmpdir` (this node's job directory).
  // nullptr, with `why` set, when libpmix is missing or will not start.
  static std::unique_ptr<PmixServer> start(const std::string& tmpdir, std::string& why);
  ~PmixServer() override;
  PmixServer(const PmixServer&) = delete;
  PmixServer& operator=(const PmixServer&) = delete;

  // The job's store, for fences across nodes (none: a one-node job). Must
  // outlive this object, or be detached with nullptr first.
  void attach_store(StoreConnection* connection, int node_rank);
  // Readable when take_events() has something to do.
  int event_fd() const { return m_wake.get(); }

  std::vector<EnvVars> start_round(const PmixJob& job) override;
  std::vector<MpiEvent> take_events() override;

  // --- libpmix's thread: queue an upcall and wake the main thread ----------
  struct Upcall;
  void post(std::unique_ptr<Upcall> upcall);

 private:
  PmixServer();
  void fence(Upcall& call);
  void complete_fence(Upcall& call, bool ok, std::string data);

  posix::Fd m_wake;  // eventfd
  std::mutex m_mutex;
  std::vector<std::unique_ptr<Upcall>> m_queue;  // guarded by m_mutex
  // The main thread's.
  std::optional<PmixJob> m_job;
  std::string m_registered;  // the namespace libpmix holds
  std::unique_ptr<FenceExchange> m_fences;
};

}  // namespace ddplaunch
