#include "agent/metrics_http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "config/launch_error.hpp"
#include "log.hpp"
#include "posix/fd.hpp"
#include "posix/library.hpp"
#include "posix/net.hpp"

#if DDPLAUNCH_HAVE_MHD
#include <microhttpd.h>
#endif

namespace ddplaunch {

#if DDPLAUNCH_HAVE_MHD

namespace {

// libmicrohttpd's calls, each typed as its header declares them, bound
// once (posix/library.hpp's one style).
struct Mhd {
  decltype(&::MHD_start_daemon) MHD_start_daemon = nullptr;
  decltype(&::MHD_stop_daemon) MHD_stop_daemon = nullptr;
  decltype(&::MHD_run) MHD_run = nullptr;
  decltype(&::MHD_get_timeout) MHD_get_timeout = nullptr;
  decltype(&::MHD_get_daemon_info) MHD_get_daemon_info = nullptr;
  decltype(&::MHD_create_response_from_buffer) MHD_create_response_from_buffer = nullptr;
  decltype(&::MHD_add_response_header) MHD_add_response_header = nullptr;
  decltype(&::MHD_queue_response) MHD_queue_response = nullptr;
  decltype(&::MHD_destroy_response) MHD_destroy_response = nullptr;
};

bool bind_mhd(Mhd& m, std::string& why) {
  void* handle = posix::open_library("libmicrohttpd.so.12", "libmicrohttpd12", why);
  auto sym = [handle, &why](auto& fn, const char* name) {
    return posix::load_symbol(handle, fn, name, why, "libmicrohttpd");
  };
  return handle != nullptr && sym(m.MHD_start_daemon, "MHD_start_daemon") &&
         sym(m.MHD_stop_daemon, "MHD_stop_daemon") && sym(m.MHD_run, "MHD_run") &&
         sym(m.MHD_get_timeout, "MHD_get_timeout") &&
         sym(m.MHD_get_daemon_info, "MHD_get_daemon_info") &&
         sym(m.MHD_create_response_from_buffer, "MHD_create_response_from_buffer") &&
         sym(m.MHD_add_response_header, "MHD_add_response_header") &&
         sym(m.MHD_queue_response, "MHD_queue_response") &&
         sym(m.MHD_destroy_response, "MHD_destroy_response");
}

const Mhd& mhd() {
  static const Mhd table = [] {
    Mhd m;
    std::string why;
    if (!bind_mhd(m, why)) {
      throw UsageError("--metrics-port: " + why);
    }
    return m;
  }();
  return table;
}

void log_mhd(void*, const char* format, va_list args) {
  char line[512];
  std::vsnprintf(line, sizeof line, format, args);
  log::debug("metrics listener: {}", line);
}

// The listening socket (posix::listen_tcp), each failure its own line.
posix::Fd listen_on(const std::string& addr, int port) {
  unsigned char probe[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, addr.c_str(), probe) != 1 &&
      ::inet_pton(AF_INET6, addr.c_str(), probe) != 1) {
    throw UsageError("--metrics-bind " + addr +
                     ": not an IP address; give one of this host's (127.0.0.1, 0.0.0.0: all)");
  }
  try {
    return posix::listen_tcp(addr, port, 64);
  } catch (const std::system_error& e) {
    if (e.code().value() == EADDRINUSE) {
      throw UsageError("--metrics-port " + std::to_string(port) + ": the port is in use on " +
                       addr + "; give another (each agent on one host needs its own)");
    }
    if (e.code().value() == EADDRNOTAVAIL) {
      throw UsageError("--metrics-bind " + addr +
                       ": not an address of this host; give one of its addresses, or 0.0.0.0");
    }
    throw UsageError("--metrics-port " + std::to_string(port) + " on " + addr + ": " + e.what());
  }
}

}  // namespace

struct MetricsServer::Impl {
  Handler handler;
  posix::Fd listener;
  MHD_Daemon* daemon = nullptr;
  int epoll_fd = -1;
};

namespace {

MHD_Result answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char*, const char*, size_t* upload_size, void**) {
  auto* impl = static_cast<MetricsServer::Impl*>(cls);
  const Mhd& m = mhd();
  MetricsServer::Response r;
  const bool head = std::strcmp(method, "HEAD") == 0;
  if (!head && std::strcmp(method, "GET") != 0) {
    r = {405, "text/plain; charset=utf-8", "only GET and HEAD\n"};
  } else if (*upload_size != 0) {
    r = {400, "text/plain; charset=utf-8", "no body expected\n"};
    *upload_size = 0;
  } else {
    try {
      r = impl->handler(url);
    } catch (const std::exception& e) {  // never through libmicrohttpd's C frames
      log::warn("metrics listener: {} failed: {}", url, e.what());
      r = {500, "text/plain; charset=utf-8", "internal error\n"};
    }
  }
  MHD_Response* resp =
      m.MHD_create_response_from_buffer(r.body.size(), r.body.data(), MHD_RESPMEM_MUST_COPY);
  if (resp == nullptr) {
    return MHD_NO;
  }
  m.MHD_add_response_header(resp, "Content-Type", r.type.c_str());
  m.MHD_add_response_header(resp, "Cache-Control", "no-store");
  const MHD_Result queued = m.MHD_queue_response(connection, static_cast<unsigned>(r.status), resp);
  m.MHD_destroy_response(resp);
  return queued;
}

}  // namespace

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& addr, int port,
                                                    Handler handler) {
  posix::Fd listener = listen_on(addr, port);
  const Mhd& m = mhd();
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->m_impl = std::make_unique<Impl>();
  Impl& impl = *server->m_impl;
  impl.handler = std::move(handler);
  impl.listener = std::move(listener);
  impl.daemon = m.MHD_start_daemon(
      MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, nullptr, nullptr, &answer, &impl,
      MHD_OPTION_LISTEN_SOCKET, impl.listener.get(), MHD_OPTION_CONNECTION_LIMIT, k_connections,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, k_request_bytes, MHD_OPTION_CONNECTION_TIMEOUT, k_idle_s,
      MHD_OPTION_EXTERNAL_LOGGER, &log_mhd, nullptr, MHD_OPTION_END);
  if (impl.daemon == nullptr) {
    throw UsageError("--metrics-port " + std::to_string(port) +
                     ": libmicrohttpd could not start its listener");
  }
  const MHD_DaemonInfo* info = m.MHD_get_daemon_info(impl.daemon, MHD_DAEMON_INFO_EPOLL_FD);
  impl.epoll_fd = info != nullptr ? info->epoll_fd : -1;
  server->m_port = port;
  return server;
}

MetricsServer::~MetricsServer() {
  if (m_loop != nullptr) {
    m_loop->remove(fd());
    m_loop->detach(*this);
  }
  if (m_impl && m_impl->daemon != nullptr) {
    mhd().MHD_stop_daemon(m_impl->daemon);
  }
}

std::optional<MetricsServer::TimePoint> MetricsServer::deadline() const {
  MHD_UNSIGNED_LONG_LONG ms = 0;
  if (mhd().MHD_get_timeout(m_impl->daemon, &ms) != MHD_YES) {
    return std::nullopt;  // nothing timed: no connection open
  }
  return std::chrono::steady_clock::now() +
         std::chrono::milliseconds(std::min<MHD_UNSIGNED_LONG_LONG>(ms, 60'000));
}

void MetricsServer::on_time(TimePoint) {
  // Only when libmicrohttpd has something timed (an open connection):
  // MHD_run then closes what has been idle past k_idle_s.
  MHD_UNSIGNED_LONG_LONG ms = 1;
  if (mhd().MHD_get_timeout(m_impl->daemon, &ms) == MHD_YES && ms == 0) {
    run();
  }
}

int MetricsServer::fd() const {
  return m_impl->epoll_fd;
}

void MetricsServer::run() {
  mhd().MHD_run(m_impl->daemon);
}

void MetricsServer::attach(posix::EventLoop& loop) {
  m_loop = &loop;
  loop.set(fd(), EPOLLIN, loop.attach(*this));
}

void MetricsServer::on_ready(uint64_t, uint32_t) {
  run();
}

#else

struct MetricsServer::Impl {};

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string&, int, Handler) {
  throw UsageError(
      "--metrics-port: this ddplaunch was built without libmicrohttpd (Debian: "
      "libmicrohttpd-dev); rebuild it with that package installed");
}
MetricsServer::~MetricsServer() = default;
int MetricsServer::fd() const {
  return -1;
}
void MetricsServer::run() {}
void MetricsServer::attach(posix::EventLoop&) {}
void MetricsServer::on_ready(uint64_t, uint32_t) {}
std::optional<MetricsServer::TimePoint> MetricsServer::deadline() const {
  return std::nullopt;
}
void MetricsServer::on_time(TimePoint) {}

#endif

}  // namespace ddplaunch
