#include "launcher/agent_channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "config/launch_error.hpp"
#include "log.hpp"

namespace ddplaunch {

namespace {

std::atomic<bool> g_channel_ended{false};
std::atomic<bool> g_stopped_by_command{false};

// Acts on one signal byte: the launching command's Ctrl-C, SIGTERM, ...; its
// own stop is SIGTERM too.
void raise_byte(unsigned char b) {
  if (b == static_cast<unsigned char>(k_channel_stop)) {
    g_stopped_by_command = true;
    ::kill(::getpid(), SIGTERM);
  } else if (b >= 1 && b < NSIG && b != SIGKILL && b != SIGSTOP) {
    ::kill(::getpid(), b);
  }
}

}  // namespace

AgentChannel open_agent_channel(int timeout_ms) {
  std::string bytes;
  char buf[65536];
  size_t consumed = 0;
  std::optional<ChannelHeader> header;
  const auto fail = [](const std::string& why) {
    return LaunchError(k_exit_internal,
                       "--launcher-channel: " + why +
                           " (this option is for the agents a launching command starts)");
  };
  while (!header) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int n = ::poll(&p, 1, timeout_ms);
    if (n == 0) {
      throw fail("no header on stdin within " + std::to_string(timeout_ms / 1000) + " s");
    }
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw fail(std::string("poll: ") + std::strerror(errno));
    }
    const ssize_t got = ::read(STDIN_FILENO, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      throw fail("stdin ended before the header");
    }
    bytes.append(buf, static_cast<size_t>(got));
    try {
      header = decode_channel_header(bytes, consumed);
    } catch (const std::runtime_error& e) {
      throw fail(e.what());
    }
  }
  AgentChannel channel;
  channel.header = std::move(*header);
  channel.pending = bytes.substr(consumed);
  channel.fd = posix::Fd(::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3));
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (!channel.fd || null < 0 || ::dup2(null, STDIN_FILENO) < 0) {
    throw std::system_error(errno, std::generic_category(), "moving the launcher channel");
  }
  ::close(null);
  return channel;
}

void announce_ready(int node_rank) {
  const std::string line = std::string(k_agent_ready) + std::to_string(node_rank) + "\n";
  posix::write_all(STDOUT_FILENO, line);
}

bool agent_channel_ended() {
  return g_channel_ended;
}

bool agent_stopped_by_command() {
  return g_stopped_by_command;
}

void announce_store_port(int port) {
  const std::string line = std::string(k_agent_store_port) + std::to_string(port) + "\n";
  posix::write_all(STDOUT_FILENO, line);
}

void announce_node_0_lost(const std::string& why) {
  std::string line = std::string(k_agent_node_0_lost) + why;
  std::replace(line.begin(), line.end(), '\n', ' ');
  posix::write_all(STDOUT_FILENO, line + "\n");
}

void watch_agent_channel(AgentChannel& channel) {
  for (const char c : channel.pending) {
    raise_byte(static_cast<unsigned char>(c));
  }
  channel.pending.clear();
  std::thread([fd = channel.fd.release()] {
    unsigned char buf[64];
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        break;
      }
      for (ssize_t i = 0; i < n; ++i) {
        raise_byte(buf[i]);
      }
    }
    log::warn("the launching command is gone (its connection to this node closed): stopping");
    g_channel_ended = true;
    ::kill(::getpid(), SIGTERM);
    ::close(fd);
  }).detach();
}

}  // namespace ddplaunch
