#include "agent/stack_capture.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>

#include "agent/python_stacks.hpp"
#include "config/integer.hpp"
#include "log.hpp"

namespace ddplaunch {

namespace {

// gdb's auto-load directory on Debian: an interpreter's extension is
// <this><the interpreter's path>-gdb.py.
constexpr const char* k_gdb_auto_load = "/usr/share/gdb/auto-load";
constexpr size_t k_max_bytes_per_process = 64 * 1024;
// How often a dumping process's file is looked at: its handler writes
// every thread's stack in one burst, and is done when the size holds.
constexpr auto k_dump_poll = std::chrono::milliseconds(20);

std::vector<std::string> gdb_line(const std::string& gdb, const std::string& pid,
                                  std::vector<std::string> commands) {
  std::vector<std::string> argv = {gdb, "-p", pid, "-batch", "-nx", "-q"};
  for (auto& c : commands) {
    argv.push_back("-ex");
    argv.push_back(std::move(c));
  }
  return argv;
}

char state_of(pid_t pid) {
  const auto text = posix::read_small_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  const size_t close = text ? text->rfind(')') : std::string::npos;
  return close != std::string::npos && close + 2 < text->size() ? (*text)[close + 2] : '?';
}

// At most `max` bytes of `text`: its head and its tail (gdb prints the
// main thread last).
std::string bounded(std::string text, size_t max) {
  if (text.size() <= max) {
    return text;
  }
  const size_t half = max / 2;
  return text.substr(0, half) + "\n... " + std::to_string(text.size() - 2 * half) +
         " bytes left out ...\n" + text.substr(text.size() - half);
}

// gdb's chatter around the stacks: what it says as it attaches and
// detaches, and a source file it cannot find.
std::string without_chatter(const std::string& text) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string_view line(text.data() + at, end - at);
    const bool chatter = line.starts_with("[Thread debugging using libthread_db") ||
                         line.starts_with("Using host libthread_db library") ||
                         line.starts_with("[Inferior ") ||
                         (line.find('\t') != std::string_view::npos &&
                          line.find(": No such file or directory.") != std::string_view::npos);
    if (!chatter) {
      out.append(line);
    }
    at = end;
  }
  return out;
}

}  // namespace

bool is_python(const std::string& exe) {
  return std::filesystem::path(exe).filename().string().starts_with("python");
}

bool py_bt_for(const std::string& exe) {
  std::error_code ec;
  return is_python(exe) && !exe.empty() && exe.front() == '/' &&
         std::filesystem::exists(std::string(k_gdb_auto_load) + exe + "-gdb.py", ec);
}

StackPlan plan_stacks(pid_t pid, const std::string& exe, bool py_bt) {
  const std::string p = std::to_string(pid);
  StackPlan plan;
  if (py_bt) {
    plan.candidates.push_back(gdb_line(
        "gdb", p,
        {"thread apply all py-bt", "set print frame-arguments none", "thread apply all bt"}));
    plan.tools.emplace_back("gdb py-bt");
  } else if (is_python(exe)) {
    plan.note =
        "Python frames not shown: install " +
        (exe.empty() ? std::string("python3.X") : std::filesystem::path(exe).filename().string()) +
        "-dbg and gdb (gdb's py-bt reads them)";
  }
  plan.candidates.push_back({"eu-stack", "-p", p});
  plan.tools.emplace_back("eu-stack");
  plan.candidates.push_back(gdb_line("gdb", p, {"thread apply all bt"}));
  plan.tools.emplace_back("gdb");
  plan.candidates.push_back(gdb_line("cuda-gdb", p, {"thread apply all bt"}));
  plan.tools.emplace_back("cuda-gdb");
  return plan;
}

StackCapture::StackCapture(Spawner& spawner, const Clock& clock)
    : m_spawner(spawner),
      m_clock(clock),
      // A debugger reading Python's symbols holds ~200 MiB and a core for
      // a second or two.
      m_max_running(std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 8)) {}

StackCapture::~StackCapture() {
  for (auto& r : m_requests) {
    for (auto& ps : r.processes) {
      for (auto& p : ps) {
        if (p.step == Step::debugging) {
          m_spawner.stop_debugger(p.debugger);
        }
      }
    }
  }
}

void StackCapture::use_python_signal(int signal, std::string dump_dir) {
  m_python_signal = signal;
  m_dump_dir = std::move(dump_dir);
}

size_t StackCapture::bytes_for_node(size_t nodes) {
  return std::min(k_bytes_per_node, k_bytes_per_job / std::max<size_t>(1, nodes));
}

void StackCapture::capture(NodeStacks head, std::vector<Target> targets, TimePoint deadline,
                           Done done, size_t bytes) {
  if (m_python_signal != 0 && m_requests.empty()) {
    // The files of processes gone (a DataLoader's workers come and go).
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(m_dump_dir, ec)) {
      const std::string name = entry.path().filename().string();
      const auto pid = parse_integer_in(name, 1, std::numeric_limits<pid_t>::max());
      if (pid && ::kill(static_cast<pid_t>(*pid), 0) != 0 && errno == ESRCH) {
        std::filesystem::remove(entry.path(), ec);
      }
    }
  }
  Request r{head, std::move(targets), {}, deadline, std::move(done), bytes};
  for (const Target& t : r.targets) {
    std::vector<Process> ps;
    for (size_t i = 0; t.ended.empty() && i < t.pids.size() && i < k_processes; ++i) {
      Process p;
      p.pid = t.pids[i];
      std::error_code ec;
      p.exe = std::filesystem::read_symlink("/proc/" + std::to_string(p.pid) + "/exe", ec);
      ps.push_back(std::move(p));
    }
    r.processes.push_back(std::move(ps));
  }
  m_requests.push_back(std::move(r));
  start_more();
  finish_ready();
}

bool StackCapture::armed(const Process& p) const {
  struct stat st = {};
  return m_python_signal != 0 &&
         ::stat((m_dump_dir + "/" + std::to_string(p.pid)).c_str(), &st) == 0 &&
         catches_signal(p.pid, m_python_signal);
}

bool StackCapture::dumping(pid_t pid) const {
  for (const auto& r : m_requests) {
    for (const auto& ps : r.processes) {
      for (const auto& p : ps) {
        if (p.pid == pid && p.step == Step::dumping) {
          return true;
        }
      }
    }
  }
  return false;
}

void StackCapture::start_more() {
  const TimePoint now = m_clock.now();
  for (auto& r : m_requests) {
    for (size_t t = 0; t < r.processes.size(); ++t) {
      for (auto& p : r.processes[t]) {
        if (now >= r.deadline) {
          continue;  // on_time() says it was not taken
        }
        if (p.step == Step::waiting) {
          if (!armed(p)) {
            p.step = Step::queued;
          } else if (!dumping(p.pid)) {  // one dump at a time into its file
            begin_dump(r, p);
          }
        }
        if (p.step == Step::queued && m_running < m_max_running) {
          start(r, t, p);
        }
      }
    }
  }
}

void StackCapture::begin_dump(const Request& request, Process& p) {
  const std::string path = m_dump_dir + "/" + std::to_string(p.pid);
  const char state = state_of(p.pid);
  if (state == 'T' || state == 't') {
    p.note =
        "stopped (SIGSTOP): not asked for its own Python frames, which it would write only once "
        "continued";
    p.step = Step::queued;
    return;
  }
  // Its handler appends (O_APPEND): what an earlier request read goes.
  if (::truncate(path.c_str(), 0) != 0 || ::kill(p.pid, m_python_signal) != 0) {
    p.note = std::string("its Python frames could not be asked for: ") + std::strerror(errno);
    p.step = Step::queued;
    return;
  }
  p.step = Step::dumping;
  p.dump_until = std::min(request.deadline, m_clock.now() + k_dump_limit);
  p.look_at = m_clock.now() + k_dump_poll;
}

void StackCapture::look_at_dump(Process& p, TimePoint now) {
  const std::string path = m_dump_dir + "/" + std::to_string(p.pid);
  struct stat st = {};
  const off_t size = ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
  if ((size > 0 && size == p.dump_size) || now >= p.dump_until) {
    p.look_at.reset();
    p.python = posix::read_small_file(path, 4 * k_max_bytes_per_process).value_or("");
    if (p.python.empty()) {
      p.note = fmt::format(
          "no Python frames: it was sent signal {} and wrote none in time (does the program "
          "handle that signal itself?)",
          m_python_signal);
    }
    p.step = Step::queued;
    return;
  }
  p.dump_size = size;
  p.look_at = now + k_dump_poll;
}

void StackCapture::start(Request& request, size_t target, Process& p) {
  p.step = Step::debugging;
  const bool own_frames = !p.python.empty();
  const StackPlan plan = plan_stacks(p.pid, p.exe, !own_frames && py_bt_for(p.exe));
  if (!own_frames && !plan.note.empty()) {
    std::string why = plan.note;
    if (m_python_signal != 0 && p.note.empty()) {
      why +=
          ", or let it load the sitecustomize.py of --python-stacks-signal (it does not with "
          "python -I, -E or -S, or with a PYTHONPATH set after the launch)";
    }
    p.note = p.note.empty() ? why : p.note + "; " + why;
  }
  p.was_stopped = state_of(p.pid) == 'T';
  p.memfd = posix::Fd(::memfd_create("ddplaunch-stacks", MFD_CLOEXEC));
  if (!p.memfd) {
    p.step = Step::ended;
    p.note = std::string("no memory file for the debugger's output: ") + std::strerror(errno);
    p.stacks = std::move(p.python);
    return;
  }
  const auto debugger =
      m_spawner.start_debugger(request.targets[target].local_rank, plan.candidates,
                               "/proc/self/fd/" + std::to_string(p.memfd.get()));
  if (!debugger) {
    p.step = Step::ended;
    p.memfd.close();
    p.tool = own_frames ? "faulthandler" : "";
    p.note = own_frames ? "native frames not shown: install elfutils, or gdb"
                        : "no eu-stack, gdb or cuda-gdb on PATH: install elfutils, or gdb";
    p.stacks = std::move(p.python);
    return;
  }
  p.debugger = debugger->pid;
  p.tool = (own_frames ? "faulthandler + " : "") + plan.tools.at(debugger->which);
  if (!p.note.empty() || own_frames || p.tool == "gdb py-bt") {
    // the note stands
  } else if (is_python(p.exe)) {
    p.note = "Python frames not shown: install gdb";
  }
  p.kill_at = std::min(request.deadline, m_clock.now() + k_debugger_limit);
  ++m_running;
}

void StackCapture::end(Process& p) {
  p.step = Step::ended;
  p.kill_at.reset();
  --m_running;
  const off_t size = p.memfd ? ::lseek(p.memfd.get(), 0, SEEK_END) : 0;
  std::string text(static_cast<size_t>(std::max<off_t>(0, size)), '\0');
  const ssize_t got = text.empty() ? 0 : ::pread(p.memfd.get(), text.data(), text.size(), 0);
  text.resize(static_cast<size_t>(std::max<ssize_t>(0, got)));
  p.memfd.close();
  p.stacks = p.tool.ends_with("eu-stack") ? std::move(text) : without_chatter(text);
  if (!p.python.empty()) {
    // Its own Python frames first, then the native ones.
    p.stacks = std::move(p.python) + "\n" + p.stacks;
  }
}

void StackCapture::stop(Process& p) {
  p.timed_out = true;
  m_spawner.stop_debugger(p.debugger);
  m_leaving.push_back({p.debugger, p.pid, p.was_stopped});
  end(p);
}

bool StackCapture::on_debugger_ended(pid_t pid) {
  for (auto it = m_leaving.begin(); it != m_leaving.end(); ++it) {
    if (it->debugger == pid) {
      if (!it->was_stopped) {
        ::kill(it->held, SIGCONT);  // killed while it held the process stopped
      }
      m_leaving.erase(it);
      return true;
    }
  }
  for (auto& r : m_requests) {
    for (auto& ps : r.processes) {
      for (auto& p : ps) {
        if (p.step == Step::debugging && p.debugger == pid) {
          end(p);
          start_more();
          finish_ready();
          return true;
        }
      }
    }
  }
  return false;
}

std::optional<StackCapture::TimePoint> StackCapture::next_deadline() const {
  std::optional<TimePoint> first;
  for (const auto& r : m_requests) {
    first = first ? std::min(*first, r.deadline) : r.deadline;
    for (const auto& ps : r.processes) {
      for (const auto& p : ps) {
        for (const auto& at : {p.kill_at, p.look_at}) {
          if (at) {
            first = std::min(*first, *at);
          }
        }
      }
    }
  }
  return first;
}

void StackCapture::on_time() {
  const TimePoint now = m_clock.now();
  for (auto& r : m_requests) {
    for (auto& ps : r.processes) {
      for (auto& p : ps) {
        if (p.kill_at && now >= *p.kill_at) {
          stop(p);
        }
        if (p.look_at && now >= *p.look_at) {
          look_at_dump(p, now);
        }
        if ((p.step == Step::waiting || p.step == Step::queued) && now >= r.deadline) {
          p.step = Step::ended;
          p.note = p.python.empty() ? "not taken: the command's --timeout came first"
                                    : "native frames not taken: the command's --timeout came first";
          p.stacks = std::move(p.python);
        }
      }
    }
  }
  start_more();
  finish_ready();
}

void StackCapture::finish_ready() {
  for (auto it = m_requests.begin(); it != m_requests.end();) {
    bool all = true;
    for (const auto& ps : it->processes) {
      for (const auto& p : ps) {
        all = all && p.step == Step::ended;
      }
    }
    if (!all) {
      ++it;
      continue;
    }
    Done done = std::move(it->done);
    NodeStacks record = answer(*it);
    it = m_requests.erase(it);
    done(std::move(record));
  }
}

NodeStacks StackCapture::answer(const Request& r) const {
  NodeStacks out = r.head;
  size_t count = 0;
  for (const auto& ps : r.processes) {
    count += ps.size();
  }
  const size_t per_process =
      std::min(k_max_bytes_per_process, r.bytes / std::max<size_t>(1, count));
  // What a node of a smaller job would have shown of the same process.
  const size_t alone =
      std::min(k_max_bytes_per_process, k_bytes_per_node / std::max<size_t>(1, count));
  for (size_t t = 0; t < r.targets.size(); ++t) {
    const Target& target = r.targets[t];
    RankStacks rank{target.rank, target.local_rank, -1, target.pid, target.ended, {}};
    for (const Process& p : r.processes[t]) {
      ProcessStacks one{p.pid, p.exe, p.tool, bounded(p.stacks, per_process), p.note};
      if (p.stacks.size() > per_process && per_process < alone) {
        one.note += fmt::format(
            "{}cut to {} bytes: the nodes asked share {} MiB of stacks; ask fewer with --nodes "
            "or --ranks for more of them",
            one.note.empty() ? "" : "; ", per_process, k_bytes_per_job / (1024 * 1024));
      }
      if (p.timed_out) {
        one.note = fmt::format("{} did not finish in time; stopped{}",
                               p.tool.empty() ? "the debugger" : p.tool,
                               p.note.empty() ? "" : "; " + p.note);
      }
      rank.processes.push_back(std::move(one));
    }
    out.ranks.push_back(std::move(rank));
  }
  return out;
}

}  // namespace ddplaunch
