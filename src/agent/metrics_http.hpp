// MetricsServer: --metrics-port's HTTP listener, GNU libmicrohttpd run in its
// external-epoll mode on the process's loop (no thread of its own), as an
// owner of its own there: the loop hands it its epoll's events and the
// deadline libmicrohttpd asks for (MHD_get_timeout: an idle connection's
// end), and run() serves what is ready, never blocking; the handler is
// called on the loop's thread. Read-only: GET and
// HEAD only; at most k_connections at once, each request's headers within
// k_request_bytes, an idle connection closed after k_idle_s. libmicrohttpd
// is loaded (dlopen) only when the listener starts: a job without
// --metrics-port never loads it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "posix/event_loop.hpp"

namespace ddplaunch {

class MetricsServer : public posix::EventLoop::Owner {
 public:
  struct Response {
    int status = 200;
    std::string type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response(std::string_view path)>;
  static constexpr unsigned k_connections = 32;
  static constexpr size_t k_request_bytes = 16 * 1024;
  static constexpr unsigned k_idle_s = 10;

  // Listens on `addr`:`port`. Throws UsageError (exit 2) for an address not
  // of this host, a port in use, or a libmicrohttpd that cannot be loaded.
  static std::unique_ptr<MetricsServer> start(const std::string& addr, int port, Handler handler);
  ~MetricsServer() override;
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int fd() const;  // readable when run() has work
  void run();      // serves what is ready; never blocks
  int port() const { return m_port; }
  // Served from `loop` (which must outlive it) from now on.
  void attach(posix::EventLoop& loop);
  void on_ready(uint64_t tag, uint32_t events) override;
  std::optional<TimePoint> deadline() const override;
  void on_time(TimePoint now) override;

  struct Impl;

 private:
  MetricsServer() = default;
  std::unique_ptr<Impl> m_impl;
  int m_port = 0;
  posix::EventLoop* m_loop = nullptr;
};

}  // namespace ddplaunch
