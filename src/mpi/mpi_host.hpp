// MpiHost: what the Agent asks of the MPI runtime it hosts for its workers
// (the PMIx server, mpi/pmix_server.hpp; a fake in the agent's unit tests):
// a namespace per round, and what the workers told it. Not thread-safe: the
// main thread calls it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mpi/pmix_job.hpp"

namespace ddplaunch {

// Something a worker told its PMIx server.
struct MpiEvent {
  enum class Kind {
    k_connected,  // PMIx_Init (MPI_Init)
    k_finalized,  // PMIx_Finalize (MPI_Finalize)
    k_aborted,    // PMIx_Abort (MPI_Abort): `status` and `message` say why
  };
  Kind kind = Kind::k_connected;
  int rank = 0;  // the worker's global rank
  int status = 0;
  std::string message;
};

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// What a round's workers need to find their server: the same variables for
// all but one, which holds each worker's rank.
struct MpiRoundEnv {
  EnvVars shared;             // empty: no server (the workers get nothing)
  std::string rank_variable;  // set to each worker's global rank ("PMIX_RANK")
};

class MpiHost {
 public:
  virtual ~MpiHost() = default;
  // Registers `job`'s namespace (forgetting the previous round's) and its
  // local ranks before they start. Throws std::runtime_error when the
  // server refuses.
  virtual MpiRoundEnv start_round(const PmixJob& job) = 0;
  // Handles what the server was asked since the last call (its event fd
  // was readable): fences and direct modex requests are answered or moved
  // along, and what the current round's workers told it is returned.
  virtual std::vector<MpiEvent> handle_upcalls() = 0;
};

}  // namespace ddplaunch
