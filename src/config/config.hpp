// Config: every option of a ddplaunch run, as one plain value, with the
// default of each written once, next to it (--help and --dry-run show these).
// Built by cluster/precedence.hpp from the command line and the detected
// environment, checked by validate(), and read by every later step; nothing
// changes it afterwards. Pure: no system calls.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/hosts.hpp"

namespace ddplaunch {

enum class NprocMode {
  k_fixed,  // a number given on the command line
  k_auto,   // GPUs if any, else CPUs
  k_cpu,    // online CPUs
  k_gpu,    // GPUs this node may use; an error when there are none
  k_xpu,    // Intel GPUs (/sys/class/drm); an error when there are none
};

// How local ranks are bound to this node's allowed CPUs.
// Whether a worker's stdout is a pseudo-terminal (--stdout-tty).
enum class StdoutTty {
  k_auto,  // for a native program linked with an MPI library, as under mpirun
  k_yes,
  k_no,
};

enum class CpuBind {
  k_none,   // inherit the launcher's affinity
  k_cores,  // split the allowed CPUs into one contiguous share per local rank
  k_numa,   // each local rank gets the allowed CPUs of one NUMA node, ranks spread in blocks
};

// How the agents of a job started from one command reach their hosts.
enum class Launcher {
  k_auto,   // ssh with --hosts/--hostfile; srun inside a Slurm allocation outside a step
  k_ssh,    // one ssh connection per host (the launching host itself runs its agent directly)
  k_srun,   // one srun step with a task on every node of the allocation
  k_local,  // every agent on this machine (tests, benchmarks, simulations)
};

// Which standard streams a torchrun-style --redirects/--tee value selects:
// 0 none, 1 stdout, 2 stderr, 3 both; either one value for every local rank
// or "LOCAL_RANK:VALUE,..." per local rank.
struct StreamSelection {
  int all = 0;                        // Default: 0 (no stream)
  std::map<int, int> per_local_rank;  // overrides `all` for the listed local ranks

  int for_local_rank(int local_rank) const;
  bool selects_stdout(int local_rank) const { return (for_local_rank(local_rank) & 1) != 0; }
  bool selects_stderr(int local_rank) const { return (for_local_rank(local_rank) & 2) != 0; }
  bool any() const { return all != 0 || !per_local_rank.empty(); }
};

struct Config {
  // --- Workers ---------------------------------------------------------------
  NprocMode nproc_mode = NprocMode::k_fixed;  // Default: k_fixed
  int nproc_per_node = 1;  // Default: 1. Resolved to a number for every mode before planning.
  std::string program;     // Required: the program (or .py script, or module with -m)
  std::vector<std::string> program_args;
  bool no_python = false;  // Default: false. --no-python runs `program` as given.
  bool module = false;     // Default: false. -m/--module runs `python -m program`.
  // Default: true. Each agent hosts a PMIx server for its workers, so an MPI
  // program's MPI_Init joins the job (docs/MPI.md); --no-pmix turns it off.
  bool pmix = true;
  // mpirun's -np/-n: the job's process count, checked against (or giving)
  // --nproc-per-node across --nnodes. Default: unset.
  std::optional<int> np;
  std::string python;            // Default: empty = $PYTHON_EXEC, else python3 on PATH
  std::string role = "default";  // Default: "default" (ROLE_NAME)
  int max_restarts = 0;          // Default: 0. Passed to workers as TORCHELASTIC_MAX_RESTARTS.
  // Restarts that follow progress: a failed round counts against
  // --max-restarts only when some node's ranks made this many progress
  // events in it (output lines, progress-fd writes); a round without
  // counts against max_no_progress_restarts instead, in a row. Default: 0 =
  // off (every failure counts against --max-restarts, as torchrun).
  int restart_min_progress = 0;
  int max_no_progress_restarts = 3;  // Default: 3 failed rounds in a row without progress
  // Before a restart, how long a node waits for what its last round left
  // (processes that escaped, found by the job's marker) to be gone; a node
  // still dirty then leaves the job. Default: 60 seconds.
  double restart_reclaim_timeout_s = 60;
  bool progress_restarts() const { return restart_min_progress > 0; }
  // Worker environment styles on top of torch's (always on). Default: none.
  bool env_mpi = false;  // "mpi": OMPI_COMM_WORLD_* and Azure ML's master variables
  bool env_tf = false;   // "tf": TF_CONFIG, with a port reserved for each worker
  // TensorFlow parameter-server jobs (env/tf_env.hpp places them by rank).
  bool tf_chief = false;  // Default: false. Rank 0 is the chief.
  int tf_ps = 0;          // Default: 0. Parameter servers after the chief.
  // torch.distributed.launch's script argument: "" none, "dash" --local-rank=N,
  // "underscore" --local_rank=N (1.x). Default: "" (none).
  std::string local_rank_arg;
  // torchrun's --run-path: run the program with Python whatever its name (and
  // despite --no-python). Default: false.
  bool run_path = false;
  int gpus_per_proc = 0;  // Default: 0 = CUDA_VISIBLE_DEVICES inherited as is
  // torchrun's --virtual-local-rank: LOCAL_RANK=0 for every worker and
  // CUDA_VISIBLE_DEVICES the one GPU assigned to it. Default: false.
  bool virtual_local_rank = false;
  CpuBind cpu_bind = CpuBind::k_none;  // Default: k_none
  bool report_bindings = false;        // Default: false

  // --- Nodes and rendezvous ----------------------------------------------------
  int nnodes = 1;  // Default: 1 (the most nodes, with --nnodes MIN:MAX)
  // --nnodes MIN:MAX: the fewest nodes the job runs with. Default: 0 = nnodes
  // (a fixed-size job).
  int nnodes_min = 0;
  // An elastic job starts this long after MIN nodes joined, unless MAX join
  // first (torchrun's last_call_timeout). Default: 5 seconds.
  double rdzv_last_call_s = 5;
  std::optional<int> node_rank;           // Default: nullopt = automatic ("auto")
  std::string master_addr = "127.0.0.1";  // Default: 127.0.0.1
  int master_port = 29500;                // Default: 29500 (the store's port when nnodes > 1)
  std::string rdzv_id = "none";           // Default: "none" (TORCHELASTIC_RUN_ID)
  std::string rdzv_backend = "static";    // Default: "static" (c10d is accepted, same store)
  bool standalone = false;                // Default: false. --standalone: one node
  std::optional<int> worker_port;         // Default: nullopt = pick a free port on the master host
  std::string local_addr;                 // Default: empty = this host's name's address
  // Where node 0's store listens. Default: empty = every interface (as
  // PyTorch's TCPStore), or loopback when --master-addr is a loopback address.
  std::string store_bind;
  // Node 0's address comes from mpirun's PMIx server at start (the Open MPI
  // detector sets it when nothing else names node 0). Default: false.
  bool master_via_pmix = false;
  // The launcher was started by a PMIx server (srun --mpi=pmix) that can
  // carry node 0's job token to every node (the Slurm detector sets it).
  // Default: false.
  bool token_via_pmix = false;
  // The job's secret for the store: read from this file (or
  // DDPLAUNCH_RDZV_TOKEN) at start, never taken on the command line, which
  // `ps` shows. Default: empty = none.
  std::string rdzv_token_file;
  std::string rdzv_token;  // the secret itself, filled in at start; never shown
  // A token file others may read is refused rather than warned about.
  // Default: false.
  bool strict_token = false;
  int rdzv_max_clients = 4096;  // Default: 4096 connections to node 0's store
  // --tree-fanout: the children of each agent in the tree of agents that
  // fences among every node travel (topology/tree.hpp); node 0's decides
  // for the job. Default: 8 (docs/PERFORMANCE.md).
  int tree_fanout = 8;
  static constexpr int k_min_tree_fanout = 2;
  static constexpr int k_max_tree_fanout = 64;
  double rdzv_timeout_s = 600;      // Default: 600 seconds
  double heartbeat_interval_s = 1;  // Default: 1 second
  double heartbeat_timeout_s = 15;  // Default: 15 seconds
  // --preflight: before a multi-node job's first workers start, every node
  // connects to its peers (docs/RELIABILITY.md). Node 0's decides for the job.
  bool preflight = true;           // Default: on
  double preflight_timeout_s = 5;  // Default: 5 seconds for each connect

  // --- Starting every node from one command -----------------------------------
  // --hosts/-H and --hostfile: the job's hosts, node 0 first unless
  // --master-addr names another. Default: none (this node only).
  std::vector<HostSlots> hosts;
  std::string hostfile;                  // Default: empty. Read at start into `hosts`.
  Launcher launcher = Launcher::k_auto;  // Default: k_auto
  // The Slurm detector's word: this is an allocation of `slurm_nodes` nodes
  // outside any srun step, where the srun launcher starts every node.
  int slurm_nodes = 0;  // Default: 0 (not in such an allocation)
  // -x VAR / -x VAR=value (mpirun's) and --env-forward PATTERN: what of this
  // environment reaches the remote agents and their workers, beside the
  // default patterns (launcher/forward.hpp). Default: none.
  std::vector<std::string> env_export;
  std::vector<std::string> env_forward;
  std::string ssh_args;    // Default: empty. Split on spaces, before the host.
  int ssh_port = 0;        // Default: 0 = ssh's own (its config, else 22)
  std::string remote_cwd;  // Default: empty = this directory
  // mpirun's -wdir: the directory the launcher (so its workers) runs in, and
  // the remote agents' (unless --remote-cwd). Default: empty = this directory.
  std::string wdir;
  std::string remote_ddplaunch;  // Default: empty = this binary's path, else ddplaunch on PATH
  int fanout = 32;               // Default: 32 ssh connections per host; more go through a tree
  // Set by the launching command for what it starts: the agent reads the
  // launcher channel (launcher/channel.hpp) on stdin; a subtree's root starts
  // --hosts as nodes `subtree`.. of a larger job. Default: false, -1.
  bool launcher_channel = false;
  // Set by a launching command for a node 0 it starts elsewhere when the user
  // chose no --master-port: the store listens on a port free there, said on
  // stdout for the launching command to hand to the other agents.
  bool pick_store_port = false;
  int subtree = -1;

  // --- Supervision -------------------------------------------------------------
  double term_timeout_s = 30;  // Default: 30 seconds between SIGTERM and SIGKILL
  double hang_timeout_s = 0;   // a rank without progress this long is hung; 0: off
  std::string summary_json;    // Default: empty = no JSON summary file
  std::string event_log;       // Default: empty = no event log; "-": stderr
  // --metrics-port: this node serves OpenMetrics at /metrics (node 0 also a
  // live page at /) on --metrics-bind. Default: 0 = no listener.
  int metrics_port = 0;
  std::string metrics_bind = "127.0.0.1";  // Default: 127.0.0.1 (loopback only)
  // A shell command each node runs before it joins (README, Health checks): a node
  // whose check fails does not join. Default: empty = no check.
  std::string health_check;
  // --preempt-signal: this signal, received by any node, is sent to every
  // rank of every node, which then has --term-timeout to checkpoint and
  // exit; the job exits 75. Default: none (SIGUSR1/2 reach this node's ranks only).
  std::optional<int> preempt_signal;
  // --python-stacks-signal: every Python process of the job registers
  // faulthandler for this signal, and `ddplaunch stacks` asks it for its
  // Python frames with it (docs/STATUS.md). Default: none (gdb's py-bt only).
  std::optional<int> python_stacks_signal;
  double health_check_timeout_s = 60;  // Default: 60 seconds, then the check has failed

  // --- Output ------------------------------------------------------------------
  std::string prefix = "[rank {rank}]: ";     // Default: "[rank {rank}]: "; empty = none
  std::string log_dir;                        // Default: empty = no per-rank log files
  bool merge_stderr = false;                  // Default: false (workers' stderr lines go to stderr)
  StdoutTty stdout_tty = StdoutTty::k_auto;   // Default: auto (native MPI programs get one)
  StreamSelection redirects;                  // Default: none (torchrun -r/--redirects)
  StreamSelection tee;                        // Default: none (torchrun -t/--tee)
  std::optional<std::set<int>> ranks_filter;  // Default: every rank reaches the console
  std::optional<std::set<int>> local_ranks_filter;  // Default: every local rank
  // torchrun's --duplicate-stdout-filters/--duplicate-stderr-filters: console
  // lines holding any of these are also copied to the node's
  // filtered_stdout.log/filtered_stderr.log. Default: none.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;

  // --- Launcher ----------------------------------------------------------------
  bool dry_run = false;            // Default: false
  std::string log_level = "info";  // Default: "info" (trace|debug|info|warn|error|off)

  // --nnodes MIN:MAX with MIN < MAX: nodes may leave and join between rounds.
  // MIN:MAX given (N:N too: a fixed size whose extra agents wait as spares).
  // --nnodes as the nodes agree on it: "MIN:MAX".
  std::string nnodes_range() const {
    return std::to_string(nnodes_min) + ":" + std::to_string(nnodes);
  }
  bool elastic() const { return nnodes_min > 0 && nnodes_min <= nnodes && nnodes > 1; }
  int min_nodes() const { return elastic() ? nnodes_min : nnodes; }
  // This command starts the job's agents (on hosts, or through srun) rather
  // than being one.
  bool starts_agents() const {
    return !hosts.empty() || !hostfile.empty() || subtree >= 0 || slurm_nodes > 1;
  }

  // Where each value came from, by option key ("nnodes" -> "flag" or
  // "PET_NNODES"). A key that is absent has its default.
  std::map<std::string, std::string> sources;
  // What the user should hear once at start-up: detectors' notes, sources that
  // disagree.
  std::vector<std::string> notes;

  std::string source_of(const std::string& key) const;
  // True when stream output of this rank should reach the console at all.
  bool console_allows(int rank, int local_rank) const;
  // Why --ranks-filter or --local-ranks-filter lets no rank of a job of
  // `world_size` ranks (`local_world_size` on this node) reach the console;
  // nullopt when some rank does.
  std::optional<std::string> filter_matches_nothing(int world_size, int local_world_size) const;
};

// "fixed", "auto", "cpu" or "gpu".
const char* nproc_mode_name(NprocMode mode);

// A value's source as a message names it: a variable ("$PET_NNODES") or a
// file ("/etc/mpi/hostfile").
inline std::string source_text(const std::string& source) {
  return source.starts_with('/') ? source : "$" + source;
}

// The longest duration any option takes: ten years, far inside what the
// clocks can add to the present.
inline constexpr double k_max_seconds = 315'360'000;

// A duration option (seconds, as the command line takes them) in milliseconds.
std::chrono::milliseconds millis(double seconds);

// Checks what no single option can check alone (a node rank within --nnodes,
// a heartbeat timeout longer than its interval, ...). Throws UsageError with
// one line that names the options and, where a value came from a variable,
// the variable.
void validate(const Config& config);
// --nnodes against the hosts listed (--hosts, --hostfile): as many, or with
// MIN:MAX at least MIN (those beyond MAX start as hot spares). Throws UsageError.
void check_host_count(const Config& config, int hosts);

}  // namespace ddplaunch
