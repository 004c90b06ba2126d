#include "proc/spawn_helper.hpp"

#include <system_error>
#include <thread>

#include "log.hpp"

namespace ddplaunch {

SpawnHelper& SpawnHelper::get() {
  static auto* helper = new SpawnHelper;
  return *helper;
}

bool SpawnHelper::post(std::function<void()> task) {
  std::unique_lock lock(m_mutex);
  m_cv.wait(lock, [this] { return !m_task; });
  if (!m_running) {
    try {
      // Signals stay with the loop's thread: they are blocked there for
      // its signalfd, and the new thread inherits that mask.
      std::thread([this] { serve(); }).detach();
    } catch (const std::system_error& e) {
      log::debug("workers start from one thread: {}", e.what());
      return false;
    }
    m_running = true;
  }
  m_retire = false;
  m_task = std::move(task);
  m_cv.notify_all();
  return true;
}

void SpawnHelper::wait() {
  std::unique_lock lock(m_mutex);
  m_cv.wait(lock, [this] { return !m_task; });
}

void SpawnHelper::retire() {
  std::lock_guard lock(m_mutex);
  m_retire = true;
  m_cv.notify_all();
}

void SpawnHelper::serve() {
  std::unique_lock lock(m_mutex);
  while (true) {
    m_cv.wait(lock, [this] { return m_task || m_retire; });
    if (!m_task) {
      m_running = false;
      m_retire = false;
      return;
    }
    lock.unlock();
    m_task();  // catches its own exceptions; nobody changes m_task meanwhile
    lock.lock();
    m_task = nullptr;
    m_cv.notify_all();
  }
}

}  // namespace ddplaunch
