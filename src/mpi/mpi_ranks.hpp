// MpiRanks: the MPI room of a node's round. It starts each round's PMIx
// namespace on the MpiHost (the PMIx server; a fake in unit tests), takes
// what the round's ranks told the server as the server's queue fills (the
// queue's fd is registered on the loop by whoever wires it, and calls
// take_events() itself), and says at a rank's end what MPI makes of it:
// MPI_Abort's status as its exit code, a clean exit that skipped
// MPI_Finalize as a failure (mpirun's rules), and why, for the report.
// Not thread-safe: the loop's thread owns it.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mpi/mpi_host.hpp"
#include "mpi/pmix_job.hpp"
#include "supervise/exit_info.hpp"
#include "supervise/summary.hpp"

namespace ddplaunch {

class MpiRanks {
 public:
  // `host` must outlive it.
  explicit MpiRanks(MpiHost& host) : m_host(host) {}

  // The round's namespace, registered before its ranks start; what each
  // rank told the last round is forgotten. Throws what the host throws.
  MpiRoundEnv start_round(const PmixJob& job);
  // A round without a server: what the ranks say is forgotten all the same.
  void clear();
  // The host's queue has something: fences and direct modex move along,
  // and what the round's ranks said is kept.
  void take_events();
  // How local rank `local_rank`'s end counts (`stopping`: the job was being
  // stopped, so a clean exit without MPI_Finalize is no failure of its own).
  ExitInfo exit(int local_rank, const ExitInfo& info, bool stopping);
  // Why it failed, for the report (nullopt: nothing MPI-specific);
  // `wall_now` stamps it.
  std::optional<WorkerError> error(int local_rank, double wall_now) const;

 private:
  struct State {
    bool connected = false;
    bool finalized = false;
    std::optional<std::pair<int, std::string>> aborted;  // status, message
    bool skipped_finalize = false;                       // it ended with 0 without MPI_Finalize
  };
  MpiHost& m_host;
  int m_first = 0;  // the round's first local rank's global rank
  std::vector<State> m_state;
};

}  // namespace ddplaunch
