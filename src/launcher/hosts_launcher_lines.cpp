// HostsLauncher's reading of what its processes print: their lines to the
// console, the lines the launcher itself takes (an agent that started, node
// 0's store port), and the stderr lines kept to explain a failure.
#include <algorithm>

#include "config/integer.hpp"
#include "launcher/hosts_launcher.hpp"
#include "log.hpp"

namespace ddplaunch {

namespace {

constexpr size_t k_line_kept = 400;  // of a stderr line kept to explain a failure

// A line without the '\r' ssh ends its own with ("\r\n").
std::string trimmed(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) {
    line.remove_suffix(1);
  }
  return std::string(line.substr(0, k_line_kept));
}

// What ssh itself says when a connection fails or drops (its lines share
// the agent's stderr with the agent's and the workers' own).
bool is_ssh_line(std::string_view line) {
  static constexpr std::string_view k_ssh_starts[] = {"ssh: ",
                                                      "client_loop: ",
                                                      "Connection to ",
                                                      "Connection closed by ",
                                                      "Timeout, server ",
                                                      "packet_write_wait: ",
                                                      "Read from remote host ",
                                                      "kex_exchange_identification: ",
                                                      "Bad owner or permissions"};
  return std::any_of(std::begin(k_ssh_starts), std::end(k_ssh_starts),
                     [line](std::string_view start) { return line.starts_with(start); });
}

}  // namespace

void HostsLauncher::Started::note_error_line(std::string_view line) {
  last_error = trimmed(line);
  if (!start.local && is_ssh_line(line)) {
    ssh_said = last_error;
  }
}

void HostsLauncher::on_bytes(StreamPump::Id id, std::string_view chunk) {
  Started& s = m_started.at(id / 2);
  const bool is_out = id % 2 == 0;
  auto& lines = is_out ? s.out_lines : s.err_lines;
  auto on_line = [&](std::string_view text, LineEnd end) { this->on_line(s, is_out, text, end); };
  const size_t last = chunk.rfind('\n');
  if (lines.at_line_start() && last != std::string_view::npos &&
      chunk.find(k_agent_ready) == std::string_view::npos &&
      chunk.find(k_agent_store_port) == std::string_view::npos &&
      chunk.find(k_agent_node_0_lost) == std::string_view::npos) {
    // Whole lines with nothing to count: one write for all of them.
    const std::string_view whole = chunk.substr(0, last + 1);
    if (!is_out) {
      // The last line explains a failure; ssh's own are looked for in each
      // (a prefix compare, no copy, and only for a connection).
      std::string_view last_line;
      for (size_t at = 0; at < whole.size();) {
        const size_t nl = whole.find('\n', at);
        const std::string_view line = whole.substr(at, nl - at);
        if (!line.empty()) {
          last_line = line;
          if (!s.start.local && is_ssh_line(line)) {
            s.ssh_said = trimmed(line);
          }
        }
        at = nl + 1;
      }
      if (!last_line.empty()) {
        s.last_error = trimmed(last_line);
      }
    }
    m_console.write(is_out ? 1 : 2, whole);
    chunk.remove_prefix(last + 1);
  }
  lines.feed(chunk, on_line);
}

void HostsLauncher::on_closed(StreamPump::Id id) {
  Started& s = m_started.at(id / 2);
  const bool is_out = id % 2 == 0;
  (is_out ? s.out_lines : s.err_lines).finish([&](std::string_view text, LineEnd end) {
    on_line(s, is_out, text, end);
  });
}

void HostsLauncher::on_line(Started& s, bool is_out, std::string_view text, LineEnd end) {
  if (is_out && end == LineEnd::k_newline && text.starts_with(k_agent_store_port) &&
      s.start.node_rank == 0 && !s.store_port_said) {
    // The channel's line, never the user's: taken even when no header waits
    // for it any more (the job already stopped, a host could not start).
    s.store_port_said = true;
    const auto port = parse_integer_in(text.substr(k_agent_store_port.size()), 1, 65535);
    log::debug("node 0's store listens on port {}", port.value_or(0));
    if (m_held_header) {
      release_headers(port ? static_cast<int>(*port) : 0);
    }
    return;
  }
  if (is_out && end == LineEnd::k_newline && text.starts_with(k_agent_node_0_lost)) {
    if (m_upstream != nullptr) {
      m_console.write(1, std::string(text) + "\n");  // the launching command above reports it
    } else if (!m_node_0_lost) {
      m_node_0_lost = std::string(text.substr(k_agent_node_0_lost.size()));
    }
    return;
  }
  if (is_out && end == LineEnd::k_newline && text.starts_with(k_agent_ready)) {
    ++s.ready;
    ++m_ready_nodes;
    if (m_upstream != nullptr) {
      m_console.write(1, std::string(text) + "\n");  // the launching command above counts it
    }
    if (m_ready_nodes == m_total_nodes && m_upstream == nullptr) {
      const auto took = m_clock.now() - m_started_at;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
      if (took >= k_progress_after) {
        log::info("all {} nodes started, after {} ms", m_total_nodes, ms);
      } else {
        log::debug("all {} nodes started, after {} ms", m_total_nodes, ms);
      }
    }
    return;
  }
  if (!is_out && !text.empty()) {
    s.note_error_line(text);
  }
  std::string line(text);
  switch (end) {
    case LineEnd::k_newline:
    case LineEnd::k_bare_newline:
      line += '\n';
      break;
    case LineEnd::k_return:
      line += '\r';
      break;
    case LineEnd::k_piece:
      break;
  }
  m_console.write(is_out ? 1 : 2, line);
}

}  // namespace ddplaunch
