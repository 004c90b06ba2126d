#include "cluster/precedence.hpp"

#include <string_view>

#include "cluster/pet.hpp"
#include "ddplaunch/error.hpp"

namespace ddplaunch {

std::vector<Detection> detect_all(const EnvMap& env) {
  return {detect_pet(env)};
}

Config resolve(const CommandLine& command_line, const std::vector<Detection>& detections) {
  Config c;
  for (const auto& spec : option_table()) {
    const Setting* chosen = nullptr;
    if (auto it = command_line.flags.find(spec.key); it != command_line.flags.end()) {
      chosen = &it->second;
    } else {
      for (const auto& d : detections) {
        if (auto found = d.values.find(spec.key); found != d.values.end()) {
          chosen = &found->second;
          break;
        }
      }
    }
    if (chosen == nullptr) {
      continue;
    }
    try {
      spec.apply(c, chosen->value, long_name(spec));
    } catch (const UsageError& e) {
      if (chosen->source == "flag") {
        throw;
      }
      throw UsageError(std::string(e.what()) + " (set by $" + chosen->source +
                       "; fix or unset it)");
    }
    c.sources[spec.key] = chosen->source;
    if (spec.also != nullptr) {
      std::string_view also = spec.also;
      while (!also.empty()) {
        auto comma = also.find(',');
        c.sources[std::string(also.substr(0, comma))] = chosen->source;
        also = comma == std::string_view::npos ? std::string_view() : also.substr(comma + 1);
      }
    }
  }
  if (!command_line.command.empty()) {
    c.program = command_line.command.front();
    c.program_args.assign(command_line.command.begin() + 1, command_line.command.end());
  }
  validate(c);
  return c;
}

Config configure(const CommandLine& command_line, const EnvMap& env) {
  return resolve(command_line, detect_all(env));
}

}  // namespace ddplaunch
