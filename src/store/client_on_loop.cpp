#include "store/client_on_loop.hpp"

#include <chrono>

namespace ddplaunch {

ClientOnLoop::ClientOnLoop(posix::EventLoop& loop, AsyncClient& client)
    : m_loop(loop), m_client(client), m_tag(loop.attach(*this)) {}

ClientOnLoop::~ClientOnLoop() {
  if (m_fd >= 0 && m_fd == m_client.fd()) {
    m_loop.remove(m_fd);
  } else if (m_fd >= 0) {
    m_loop.forget_closed(m_fd, m_tag);
  }
  m_loop.detach(*this);
}

void ClientOnLoop::prepare() {
  // A closed socket's registration went with it, and its number is the next
  // socket's as often as not: under the same number and events, an attempt
  // that timed out left every later one unwatched (each then timed out in
  // turn, though the store answered). Nor may its number be taken from the
  // loop blindly: another fd (a worker's pipe) may hold it now.
  const int fd = m_client.events() != 0 ? m_client.fd() : -1;
  const int attempt = m_client.attempts();
  if (m_fd >= 0 && (m_fd != fd || m_attempt != attempt)) {
    m_loop.forget_closed(m_fd, m_tag);
  }
  m_fd = fd;
  m_attempt = attempt;
  if (fd >= 0) {
    m_loop.set(fd, m_client.events(), m_tag);
  }
}

void ClientOnLoop::on_ready(uint64_t, uint32_t events) {
  m_client.on_ready(events, std::chrono::steady_clock::now());
}

}  // namespace ddplaunch
