#include "ddplaunch/rendezvous.hpp"

#include "ddplaunch/error.hpp"

namespace ddplaunch {

RendezvousResult rendezvous(const Config&, const JobLayout&) {
  throw LaunchError(k_exit_rendezvous, "multi-node jobs are not implemented yet");
}

}  // namespace ddplaunch
