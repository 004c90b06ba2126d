#include "output/pump.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "log.hpp"

namespace ddplaunch {

StreamPump::StreamPump(posix::EventLoop& loop, uint64_t tag_base, ConsoleSink& console, Sink& sink,
                       OutputRouter* router)
    : m_loop(loop),
      m_attached(false),
      m_tag_base(tag_base),
      m_console(console),
      m_sink(sink),
      m_router(router) {}

StreamPump::StreamPump(posix::EventLoop& loop, ConsoleSink& console, Sink& sink,
                       OutputRouter* router)
    : m_loop(loop),
      m_attached(true),
      m_tag_base(loop.attach(*this)),
      m_console(console),
      m_sink(sink),
      m_router(router) {}

StreamPump::~StreamPump() {
  stop_readers();
  clear();
  if (m_attached) {
    m_loop.detach(*this);
  }
}

void StreamPump::stop_readers() {
  if (m_readers) {
    m_readers->stop();
  }
}

void StreamPump::add(Id id, posix::Fd fd, int console_fd) {
  if (id >= m_streams.size()) {
    m_streams.resize(static_cast<size_t>(id) + 1);
  }
  Stream& s = m_streams[id];
  s = Stream{};
  s.console_fd = console_fd;
  m_loop.set(fd.get(), EPOLLIN, m_tag_base | id);
  s.fd = std::move(fd);
}

void StreamPump::on_ready(uint64_t tag) {
  const auto id = static_cast<Id>(tag & (posix::EventLoop::k_owner_span - 1));
  if (id == k_readers_id) {
    take_ended();
  } else {
    read(id);
  }
}

bool StreamPump::read(Id id) {
  if (!is_open(id)) {
    return false;
  }
  Stream& s = m_streams[id];
  if (s.handed != nullptr) {
    // A reader thread's: read here under its lock (an ended child's last lines).
    const int r = m_readers->read_now(*s.handed, m_buffer.get(), k_read_size);
    if (r < 0) {
      s.handed = nullptr;
      close(id);
    }
    return r > 0;
  }
  const ssize_t n = ::read(s.fd.get(), m_buffer.get(), k_read_size);
  if (n > 0) {
    m_sink.on_bytes(id, std::string_view(m_buffer.get(), static_cast<size_t>(n)));
    Stream& after = m_streams[id];  // the sink may have added streams
    if (after.console_fd == 0 || !after.fd) {
      return true;
    }
    if (static_cast<size_t>(n) >= k_pipe_full_at && !after.grown) {
      // A child that fills its pipe (64 KiB) gets a larger one: a flood then
      // costs it and the launcher a wake-up per 128 KiB, not per 64 KiB
      // (larger pipes measured slower: their pages fall out of the CPU's
      // cache). Only such a stream pays the call; best effort
      // (pipe-max-size; a pseudo-terminal has no such size).
      after.grown = true;
      (void)::fcntl(after.fd.get(), F_SETPIPE_SZ, static_cast<int>(StreamReaders::k_pipe_bytes));
      if (hand_over(id)) {
        return true;
      }
    }
    if (!m_bounded && !after.paused && m_console.backlogged(after.console_fd)) {
      // The console is behind: this child waits on its pipe, as it would
      // writing to that console itself; the loop goes on.
      m_loop.remove(after.fd.get());
      after.paused = true;
      m_paused.push_back(id);
      m_sink.on_paused(id, true);
    }
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    return false;
  }
  close(id);
  return false;
}

void StreamPump::close(Id id) {
  Stream& s = m_streams[id];
  // Its only fd now (a reader thread closed its copy when the stream ended
  // there): the close takes it out of the loop's epoll.
  m_loop.forget_closed(s.fd.get(), m_tag_base | id);
  s.fd.close();
  if (s.paused) {
    s.paused = false;
    m_paused.erase(std::find(m_paused.begin(), m_paused.end(), id));
    m_sink.on_paused(id, false);
  }
  m_sink.on_closed(id);
}

bool StreamPump::hand_over(Id id) {
  if (m_router == nullptr || m_no_readers) {
    return false;
  }
  const auto ref = m_sink.reader_stream(id);
  if (!ref) {
    return false;
  }
  if (!m_readers) {
    const int threads = StreamReaders::threads_for_this_machine();
    if (threads == 0) {
      m_no_readers = true;
      return false;
    }
    m_readers = std::make_unique<StreamReaders>(*m_router, m_console, threads);
    m_loop.set(m_readers->ended_fd(), EPOLLIN, m_tag_base | k_readers_id);
    if (m_bounded) {
      m_readers->set_unbounded();
    }
  }
  Stream& s = m_streams[id];
  StreamReaders::Slot* slot = m_readers->adopt(id, *ref, s.fd.get());
  if (slot == nullptr) {
    return false;
  }
  m_loop.remove(s.fd.get());  // kept open: the thread reads its own copy
  s.handed = slot;
  log::debug("stream {} fills its pipe: read on a reader thread from now on", id);
  return true;
}

// Streams that ended on a reader thread: closed here as the loop closes its own.
void StreamPump::take_ended() {
  for (StreamReaders::Slot* slot : m_readers->take_ended()) {
    const auto id = static_cast<Id>(slot->tag);
    if (id >= m_streams.size() || m_streams[id].handed != slot) {
      continue;  // closed here already, or a past round's
    }
    m_streams[id].handed = nullptr;
    close(id);
  }
}

void StreamPump::on_console_room() {
  for (auto it = m_paused.begin(); it != m_paused.end();) {
    Stream& s = m_streams[*it];
    if (!m_bounded && m_console.backlogged(s.console_fd)) {
      ++it;
      continue;
    }
    m_loop.set(s.fd.get(), EPOLLIN, m_tag_base | *it);
    s.paused = false;
    const Id id = *it;
    it = m_paused.erase(it);
    m_sink.on_paused(id, false);
  }
}

void StreamPump::set_bounded(bool bounded) {
  if (bounded == m_bounded) {
    return;
  }
  m_bounded = bounded;
  if (bounded) {
    on_console_room();  // what is left in the pipes is bounded: read it now
    if (m_readers) {
      m_readers->set_unbounded();
    }
  }
}

void StreamPump::clear() {
  for (Id id = 0; id < m_streams.size(); ++id) {
    Stream& s = m_streams[id];
    if (s.fd && s.handed == nullptr && !s.paused) {
      m_loop.forget_closed(s.fd.get(), m_tag_base | id);
    }
    s = Stream{};  // a reader thread stopped reading it when its round closed it
  }
  m_paused.clear();
}

}  // namespace ddplaunch
