// The store keys agents use (docs/PROTOCOL.md lists each with its record).
// Pure.
#pragma once

#include <string>

namespace ddplaunch::keys {

inline const char* const k_arrivals = "rdzv/arrivals";
inline const char* const k_plan = "rdzv/plan";
inline const char* const k_stop = "job/stop";
inline const char* const k_succeeded = "job/succeeded";
inline std::string node(int arrival) {
  return "rdzv/node/" + std::to_string(arrival);
}
inline std::string plan(int arrival) {
  return "rdzv/plan/" + std::to_string(arrival);
}
inline std::string ack(int arrival) {
  return "rdzv/ack/" + std::to_string(arrival);
}
inline std::string heartbeat(int node) {
  return "job/heartbeat/" + std::to_string(node);
}
inline std::string result(int node) {
  return "job/result/" + std::to_string(node);
}

}  // namespace ddplaunch::keys
