// SpawnHelper: the second spawning lane's thread (proc/spawn). Started at
// the first round that uses it, it stays, idle, until retire() after the
// job's last round: a worker's PR_SET_PDEATHSIG fires when the *thread* that
// started it ends, not only the process. Thread-safe: one task at a time.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

namespace ddplaunch {

class SpawnHelper {
 public:
  // The one helper (never freed: a thread may still be leaving it).
  static SpawnHelper& get();
  // Runs `task` on the helper's thread, starting one where none runs; false
  // (and `task` not run) where no thread can start.
  bool post(std::function<void()> task);
  // Returns once the posted task is done.
  void wait();
  // The thread ends once idle, without being waited for.
  void retire();

 private:
  void serve();
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::function<void()> m_task;  // posted and not done yet
  bool m_running = false;        // a thread serves
  bool m_retire = false;
};

}  // namespace ddplaunch
