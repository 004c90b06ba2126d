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
  return d;
}

}  // namespace ddplaunch
