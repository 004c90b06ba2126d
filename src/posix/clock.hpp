// Clock: the time the Agent, StoreLink and HostsLauncher read, as an
// interface so that their unit tests move time by hand. SystemClock reads the real clocks.
// Thread-compatible.
#pragma once

#include <time.h>

#include <chrono>

namespace ddplaunch {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
  // Seconds since the Unix epoch, for reports.
  virtual double wall_now() const = 0;
};

class SystemClock : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  double wall_now() const override {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
};

}  // namespace ddplaunch
