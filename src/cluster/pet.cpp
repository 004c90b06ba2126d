#include "cluster/pet.hpp"

namespace ddplaunch {

Detection detect_pet(const EnvMap& env) {
  Detection d;
  d.detector = "torchrun PET_*";
  for (const auto& spec : option_table()) {
    if (spec.pet == nullptr) {
      continue;
    }
    if (auto it = env.find(spec.pet); it != env.end()) {
      d.values[spec.key] = Setting{it->second, spec.pet};
    }
  }
  // torchrun's own fallback for --shutdown-timeout, below PET_SHUTDOWN_TIMEOUT.
  if (auto it = env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
      it != env.end() && !d.values.contains("shutdown_timeout")) {
    d.values["shutdown_timeout"] = Setting{it->second, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"};
  }
  return d;
}

}  // namespace ddplaunch
