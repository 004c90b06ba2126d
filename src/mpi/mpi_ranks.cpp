#include "mpi/mpi_ranks.hpp"

#include "log.hpp"

namespace ddplaunch {

MpiRoundEnv MpiRanks::start_round(const PmixJob& job) {
  m_first = job.local_first();
  m_state.assign(static_cast<size_t>(job.local_size()), State{});
  return m_host.start_round(job);
}

void MpiRanks::clear() {
  m_state.clear();
}

void MpiRanks::take_events() {
  for (auto& e : m_host.handle_upcalls()) {
    const int local = e.rank - m_first;
    if (local < 0 || static_cast<size_t>(local) >= m_state.size()) {
      continue;
    }
    State& s = m_state[static_cast<size_t>(local)];
    switch (e.kind) {
      case MpiEvent::Kind::k_connected:
        s.connected = true;
        break;
      case MpiEvent::Kind::k_finalized:
        s.finalized = true;
        break;
      case MpiEvent::Kind::k_aborted:
        if (!s.aborted) {
          log::debug("rank {} called MPI_Abort with error code {}: {}", e.rank, e.status,
                     e.message);
          s.aborted = std::make_pair(e.status, std::move(e.message));
        }
        break;
    }
  }
}

ExitInfo MpiRanks::exit(int local_rank, const ExitInfo& info, bool stopping) {
  take_events();  // what it told its server before it ended is queued by now
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= m_state.size()) {
    return info;
  }
  State& s = m_state[static_cast<size_t>(local_rank)];
  if (s.aborted) {
    // mpirun's rule: the job ends with the error code MPI_Abort was given
    // (as an exit code: its low byte, and 1 for a code of 0).
    const int code = s.aborted->first & 0xff;
    return ExitInfo::exited(code != 0 ? code : 1);
  }
  if (s.connected && !s.finalized && info.success() && !stopping) {
    s.skipped_finalize = true;
    return ExitInfo::exited(1);
  }
  return info;
}

std::optional<WorkerError> MpiRanks::error(int local_rank, double wall_now) const {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= m_state.size()) {
    return std::nullopt;
  }
  const State& s = m_state[static_cast<size_t>(local_rank)];
  WorkerError error;
  error.timestamp = std::to_string(static_cast<long long>(wall_now));
  if (s.aborted) {
    error.message = "MPI_Abort with error code " + std::to_string(s.aborted->first);
    if (!s.aborted->second.empty() && s.aborted->second != "N/A") {
      error.message += ": " + s.aborted->second;
    }
    return error;
  }
  if (s.skipped_finalize) {
    error.message =
        "an MPI error: it exited with code 0 after MPI_Init without calling MPI_Finalize (a "
        "failure, as under mpirun: its peers would wait for it forever)";
    return error;
  }
  return std::nullopt;
}

}  // namespace ddplaunch
