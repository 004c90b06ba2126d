// StackCapture: this node's side of `ddplaunch stacks` (docs/STATUS.md,
// "Stacks on demand"). For each rank asked about it takes the stacks of the
// rank's processes (the worker and its descendants, a few at most) while
// the job runs: a debugger attaches to one process, prints every thread's
// stack into an anonymous memory file, and detaches. Python processes get
// their Python frames from their own faulthandler where the job armed it
// (--python-stacks-signal: a signal, and the frames read from a file),
// else from gdb's py-bt where the interpreter's gdb extension is installed
// (Debian's python3.X-dbg), else native frames and a note saying what to
// install. A few debuggers run at once, each bounded in
// time; the node's answer (one JSON record) is given when all have ended or
// when the request's deadline comes, whichever is first.
// Not thread-safe: the agent's loop drives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "posix/clock.hpp"
#include "posix/fd.hpp"
#include "proc/spawner.hpp"
#include "status/stacks_record.hpp"

namespace ddplaunch {

// How one process's stacks are taken: debugger command lines to try in
// order, their names, and what is missing for a fuller picture ("" none).
struct StackPlan {
  std::vector<std::vector<std::string>> candidates;
  std::vector<std::string> tools;
  std::string note;
};
// For process `pid` running `exe` (its /proc/PID/exe, resolved): Python
// frames through gdb when `py_bt` (the interpreter's gdb extension is
// installed; py_bt_for()), else native frames (eu-stack, gdb, cuda-gdb).
StackPlan plan_stacks(pid_t pid, const std::string& exe, bool py_bt);
// Whether gdb can print `exe`'s Python frames: a Python interpreter whose
// gdb extension is in gdb's auto-load directory.
bool is_python(const std::string& exe);
bool py_bt_for(const std::string& exe);

class StackCapture {
 public:
  using TimePoint = Clock::TimePoint;
  // One rank asked about.
  struct Target {
    int rank = 0;
    int local_rank = 0;
    pid_t pid = 0;
    std::string ended;        // how it ended ("": running); no stacks then
    std::vector<pid_t> pids;  // its processes: the worker first
  };
  using Done = std::function<void(NodeStacks record)>;
  // At most this many debuggers run at once on a node, and each for at most
  // k_debugger_limit; at most k_processes of a rank's tree are shown, and
  // k_bytes_per_node of stacks go in one node's answer.
  static constexpr size_t k_processes = 4;
  static constexpr auto k_debugger_limit = std::chrono::seconds(20);
  static constexpr size_t k_bytes_per_node = 900 * 1024;
  // Every node's answer waits in node 0's store (which holds 512 MiB in
  // all) until the command reads it: the nodes asked share this much, so
  // that asking a job of 16,384 nodes for its stacks never fills the store
  // the job itself runs on (docs/STATUS.md, "Stacks on demand").
  static constexpr size_t k_bytes_per_job = 160 * 1024 * 1024;
  // One node's share when `nodes` are asked: at most k_bytes_per_node.
  static size_t bytes_for_node(size_t nodes);

  // `spawner` and `clock` must outlive it.
  StackCapture(Spawner& spawner, const Clock& clock);
  ~StackCapture();
  StackCapture(const StackCapture&) = delete;
  StackCapture& operator=(const StackCapture&) = delete;

  // Takes the stacks of `targets` and gives `done` the answer: `head` (the
  // node's fields) with its ranks added, by `deadline` at the latest, with
  // at most `bytes` of stacks (bytes_for_node()).
  void capture(NodeStacks head, std::vector<Target> targets, TimePoint deadline, Done done,
               size_t bytes = k_bytes_per_node);
  // Python processes armed by arm_python_stacks() give their own stacks:
  // `signal` asks, and `dump_dir`/<pid> holds the answer.
  void use_python_signal(int signal, std::string dump_dir);
  // How long a process's own handler may take to write its stacks.
  static constexpr auto k_dump_limit = std::chrono::seconds(2);
  // A debugger started by this ended (reaped): true when it was one of ours.
  bool on_debugger_ended(pid_t pid);
  std::optional<TimePoint> next_deadline() const;
  void on_time();
  size_t running() const { return m_running; }

 private:
  // waiting -> (dumping: its own handler writes its Python frames) ->
  // queued (for a debugger slot) -> debugging -> ended.
  enum class Step { waiting, dumping, queued, debugging, ended };
  struct Process {
    pid_t pid = 0;
    std::string exe;
    std::string tool;
    std::string note;
    std::string python;  // the frames its own handler wrote
    std::string stacks;
    posix::Fd memfd;
    pid_t debugger = -1;
    std::optional<TimePoint> kill_at;  // debugging: stopped then
    std::optional<TimePoint> look_at;  // dumping: its file is looked at then
    TimePoint dump_until{};
    off_t dump_size = -1;
    Step step = Step::waiting;
    bool timed_out = false;
    bool was_stopped = false;  // stopped before (SIGSTOP): left so after
  };
  struct Request {
    NodeStacks head;
    std::vector<Target> targets;
    std::vector<std::vector<Process>> processes;  // per target
    TimePoint deadline;
    Done done;
    size_t bytes = k_bytes_per_node;  // of stacks in the answer
  };

  void start_more();
  // Whether `process` registered the job's handler (arm_python_stacks()).
  bool armed(const Process& process) const;
  bool dumping(pid_t pid) const;
  void begin_dump(const Request& request, Process& process);
  void look_at_dump(Process& process, TimePoint now);
  void start(Request& request, size_t target, Process& process);
  void end(Process& process);
  // Past its time: killed, and its output so far taken at once (its reap
  // may never be seen here: the round's end sweeps the launcher's children).
  void stop(Process& process);
  void finish_ready();
  NodeStacks answer(const Request& request) const;

  Spawner& m_spawner;
  const Clock& m_clock;
  size_t m_max_running;
  size_t m_running = 0;
  int m_python_signal = 0;  // 0: none (no --python-stacks-signal)
  std::string m_dump_dir;
  std::deque<Request> m_requests;
  // Debuggers killed and not yet reaped: (debugger, the process it held, whether that
  // process was stopped before); that process gets SIGCONT once its debugger is gone.
  struct Leaving {
    pid_t debugger;
    pid_t held;
    bool was_stopped;
  };
  std::vector<Leaving> m_leaving;
};

}  // namespace ddplaunch
