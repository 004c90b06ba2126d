// Agent: one node's run as a state machine, from the first instruction to
// the summary. Its phases: joining (rendezvous, multi-node only), running
// (the workers), finishing (the last output of the workers drains), gathering
// (every node's results), done. With --max-restarts, a round whose rank
// failed goes from finishing back to running (one node) or joining (the
// nodes meet for the next round), with TORCHELASTIC_RESTART_COUNT one more;
// an elastic job's rounds also end when a node joins or is lost. It is told what
// happened (a signal, a worker exit, output, the link's answers, time passing) and acts through
// small interfaces: a Spawner, a Clock, a JobLink, a ConsoleSink and an MpiRanks, so it is
// unit-tested with fakes; the Driver (agent/driver.hpp) drives the real one from its loop. It is
// not free of system calls: it logs, its OutputRouter writes the --log-dir and filtered files, and
// its ErrorFiles create and read each rank's TORCHELASTIC_ERROR_FILE. Not thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/mpi_round.hpp"
#include "agent/round_view.hpp"
#include "config/config.hpp"
#include "config/env_map.hpp"
#include "ddplaunch/error.hpp"
#include "env/launch_spec.hpp"
#include "env/mpi_env.hpp"
#include "mpi/mpi_ranks.hpp"
#include "node/identity.hpp"
#include "node/process_usage.hpp"
#include "output/error_files.hpp"
#include "output/router.hpp"
#include "posix/clock.hpp"
#include "proc/spawner.hpp"
#include "rendezvous/job_link.hpp"
#include "supervise/supervisor.hpp"
#include "supervise/verdict.hpp"

namespace ddplaunch {

// How long an agent that stopped the job waits for the store to confirm the
// verdict before it ends with its own. Default: 500 ms.
inline constexpr auto k_publish_wait = std::chrono::milliseconds(500);
// How long a debugger may take to print a hung worker's native stacks.
inline constexpr auto k_stack_dump_wait = std::chrono::seconds(10);
// The stderr lines kept of a hung rank: room for every thread's stack; the
// report and the summary show the last k_report_lines of them.
inline constexpr size_t k_stack_lines = 200;
inline constexpr size_t k_report_lines = 30;
// How long to wait for output pipes to close after every worker has ended.
inline constexpr auto k_drain_timeout = std::chrono::seconds(2);
// When the workers' pipes are still open this long after the last worker
// ended, what holds them (escaped deeper than kill_all() reaches) is found
// by the job's marker and killed.
inline constexpr auto k_sweep_after = std::chrono::milliseconds(20);

class Agent : public JobLink::Listener, public RoundView {
 public:
  using TimePoint = Clock::TimePoint;
  using Stream = OutputRouter::Stream;

  // Everything referenced must outlive the Agent; `link` is null for one node;
  // `mpi` (the MPI room over the PMIx server its workers' MPI_Init finds) is
  // null with --no-pmix.
  Agent(const Config& config, const EnvMap& env, NodeIdentity self, Spawner& spawner,
        const Clock& clock, JobLink* link, ConsoleSink& console, MpiRanks* mpi = nullptr);
  // --health-check before every round after the first (the first is run
  // before joining, by run_launch): nullopt when it passed, else what failed.
  using HealthCheck = std::function<std::optional<std::string>()>;
  void set_health_check(HealthCheck check) { m_health_check = std::move(check); }
  // Before every round after the first, once the last round's processes are
  // gone: waits up to `timeout` until none of `pids` (its workers) holds GPU
  // memory; the first still holding it then, else nullopt (NVML, set by
  // run_launch; none: no wait).
  using GpuReleaseWait = std::function<std::optional<pid_t>(const std::vector<pid_t>& pids,
                                                            std::chrono::milliseconds timeout)>;
  void set_gpu_release_wait(GpuReleaseWait wait) { m_gpu_release_wait = std::move(wait); }
  // The rooms told what happens in the round (the event log, status), in
  // the order observe()d; each must outlive the Agent. Before start().
  void observe(RoundObserver& observer) { m_observers.push_back(&observer); }
  // The running round's nodes (0 before the first round).
  int round_nnodes() const { return m_plan ? m_plan->layout.nnodes : 0; }

  // RoundView: the round as it is now, for the rooms that answer about it.
  Round round() const override;
  const std::vector<pid_t>& pids() const override { return m_pids; }
  Rank rank(size_t local_rank) const override;

  // Joins the job (multi-node) or starts the workers (one node).
  void start();

  // --- events -------------------------------------------------------------------
  // Who sent a signal the launcher received, where it can tell.
  enum class SignalFrom {
    k_anyone,
    // Slurm's slurmstepd, which signals every process of a job step: the
    // workers have it too, and a forwarded or preemption signal is not sent
    // to them again, here or, for a preemption, on the other nodes.
    k_slurm,
    // The launching command (--hosts) relayed it: the reports say it was
    // the command's, not this node's.
    k_launching_command,
    // This node lost its connection to the launching command (its ssh
    // dropped, or the command was killed): SIGTERM, and the reports say so.
    k_cut_off,
    // The launching command stopped the job for its own reason (a host it
    // could not start), which it says: SIGTERM, and no node reports.
    k_stopped_by_command,
  };
  void on_signal(int sig, SignalFrom from = SignalFrom::k_anyone);
  void preempt(int sig, bool workers_have_it = false);
  // Worker `local_rank` ended; its pipes were read up to now first.
  void on_worker_exit(int local_rank, const ExitInfo& info);
  // The workers' output goes to the router, the one keeper of each rank's
  // lines and of when it last showed progress (on this Agent's Clock); the
  // Agent reads it there (the hang watch, --restart-min-progress, status).
  OutputRouter& router() { return m_router; }
  // --hang-timeout: a rank's hang clock stands still while its output is
  // not read (on_output_paused()), so its streams are read on this thread,
  // where a pause is seen, never on a reader thread.
  bool watches_hangs() const { return m_config.hang_timeout_s > 0; }
  // Worker `local_rank` wrote to its progress pipe (DDPLAUNCH_PROGRESS_FD).
  void on_progress(int local_rank);
  // --restart-min-progress: this round's progress events here (the ranks'
  // lines and progress-pipe writes while it ran), and whether they are
  // enough (the link is told once they are, at the next on_time()).
  long long round_progress() const;
  bool made_progress() const;
  bool round_made_progress() const;
  RoundSummary round_summary(const Decision& d, bool regroup) const;
  void on_output_closed(int local_rank, Stream stream);
  // The launcher stops (true) or starts again (false) reading one of worker
  // `local_rank`'s streams because the console is behind: while any is
  // stopped, the rank's hang clock stands still (it cannot show progress).
  void on_output_paused(int local_rank, bool paused);
  // The debugger `debugger` printing hung worker `local_rank`'s stacks ended.
  void on_stacks_dumped(int local_rank, pid_t debugger);
  // Call once now >= next_deadline().
  void on_time();
  std::optional<TimePoint> next_deadline() const;

  // JobLink::Listener
  void on_joined(const Topology& topology, int node_rank, const RoundStart& round) override;
  void on_join_failed(int exit_code, const std::string& message) override;
  void on_not_needed(int exit_code, const std::string& message) override;
  void on_verdict(const JobVerdict& verdict) override;
  void on_finished(std::vector<RankOutcome> ranks) override;
  void on_preflight_start(const Topology& topology, int node_rank,
                          const RoundStart& round) override;
  void on_preflight(int node_rank, double seconds,
                    const std::vector<std::string>& blocked) override;

  // --- results --------------------------------------------------------------------
  bool done() const { return m_phase == Phase::k_done; }
  // Every local worker has ended: what is left in their pipes is read now.
  bool workers_ended() const { return m_phase > Phase::k_running; }
  // "node N (host)", or "the node on host" before its rank is known.
  std::string node_name() const;
  // This node's rank in the job's last round (nullopt: it never had one).
  std::optional<int> node_rank() const;
  // The run's summary, once done() (launcher_max_rss_kib is the caller's to fill).
  const JobSummary& summary() const { return m_summary; }
  // Set when the run ended with an error rather than a job verdict (exit 2,
  // 3, 4, 127): the one line main() prints.
  const std::optional<std::string>& error() const { return m_error; }
  // The job ended because node 0 (the store) was lost: node 0 cannot say
  // so itself, the other nodes must.
  bool stopped_by_command() const { return m_stopped_by_command; }
  bool node_0_lost() const {
    return m_summary.exit_code == k_exit_node_lost &&
           (!m_verdict || m_verdict->node < 0 || m_verdict->lost == 0);
  }

 private:
  enum class Phase { k_joining, k_running, k_finishing, k_gathering, k_done };

  void begin(const Topology& topology, int node_rank);
  // begin()'s steps (agent_begin.cpp).
  JobLayout plan_round(const Topology& topology, int node_rank, bool& mpi_round);
  void report_round(const JobLayout& layout, bool mpi) const;
  bool spawn_round(const JobLayout& layout, int node_rank);
  void apply(const Supervisor::Actions& actions);
  void publish(const JobVerdict& verdict);
  void advance();
  void step();
  // step()'s cases: a node whose workers could not start; the round's end
  // (its outputs drained, then a restart or the results gathered).
  void step_failed_start(TimePoint now, bool confirmation_overdue);
  void step_finishing(TimePoint now);
  void start_finishing();
  // Every node's results are in (nullopt: only this node's are known).
  void end_gathering(std::optional<std::vector<RankOutcome>> ranks);
  void end_early(int exit_code, StopReason reason, const std::string& message, bool is_error);
  // --hang-timeout: when the first running rank without progress is due.
  std::optional<TimePoint> hang_deadline() const;
  bool hang_clock_runs(size_t local_rank) const;
  // When rank `local_rank` last showed progress: a line or a '\r' update
  // (the router's), a progress-pipe write, its start, the time its output
  // was not read (paused) not counted.
  TimePoint last_progress(size_t local_rank) const;
  // --restart-min-progress: tells the link once this round's progress is enough.
  void note_progress();
  void check_hangs(TimePoint now);
  std::string socket_ifname(const Topology& topology, int node_rank) const;
  // The job is hung: every rank here without progress for half the
  // --hang-timeout has its stacks taken (a debugger's for a native program),
  // then SIGABRT (Python's faulthandler prints its own) ends them all at once.
  void take_hung_stacks(TimePoint now, const std::string& why);
  void abort_hung(TimePoint now);
  bool is_hung(int local_rank) const;
  // "node 1 (b) received SIGINT", or "the launching command received SIGINT".
  std::string received(int sig, SignalFrom from) const;
  // The hung rank to blame, of this node's (hang_stacks.hpp's rule).
  std::optional<int> local_hang_culprit() const;
  // This node's own view of how the round ended (its Supervisor's).
  LocalEnd local_end() const;
  // Once the round's workers ended: the next round if the round failed and
  // restarts remain, or an elastic job regroups (true), else nothing.
  bool try_restart();
  // The next round, after one that ended with `decision`.
  void restart(const std::vector<RankOutcome>& local, const Decision& decision, NextRound next);
  // restart()'s steps: the round counted and told; the last round's
  // processes and GPU memory reclaimed; --health-check run again. The last
  // two return false when this node ended instead (end_early).
  void count_round(const Decision& decision, NextRound next);
  bool reclaim_last_round();
  bool check_health_again(std::optional<std::string>& unhealthy);
  // The per-round state cleared for the next round.
  void clear_round();
  // Tells every observer: tell(&RoundObserver::on_round_start).
  template <class... Args, class... Given>
  void tell(void (RoundObserver::*event)(Args...), Given&&... given) const {
    for (RoundObserver* o : m_observers) {
      (o->*event)(given...);
    }
  }
  // The rounds so far, and the current one if its workers started.
  std::vector<RoundSummary> rounds(const Decision& last) const;
  RankOutcome outcome(int local_rank) const;
  // Every local rank's outcome, with keep_fold_tails()'s last lines.
  std::vector<RankOutcome> outcomes() const;
  // outcome() with what explains a failure: the stderr tail and the error file.
  RankOutcome root_outcome(int local_rank) const;

  const Config& m_config;
  const EnvMap& m_env;
  NodeIdentity m_self;
  Spawner& m_spawner;
  const Clock& m_clock;
  JobLink* m_link;
  OutputRouter m_router;
  ErrorFiles m_error_files;
  Phase m_phase = Phase::k_joining;

  std::optional<Topology> m_topology;
  std::optional<LaunchSpec> m_plan;
  std::optional<Supervisor> m_supervisor;
  std::vector<pid_t> m_pids;
  std::vector<double> m_end_times;
  double m_start_time = 0;

  std::optional<JobVerdict> m_verdict;          // the job's verdict, from the link
  std::optional<TimePoint> m_publish_deadline;  // waiting for the store to confirm ours
  bool m_published_stop = false;
  bool m_published_success = false;
  std::optional<int> m_join_signal;  // a stop signal received while joining
  std::optional<int> m_late_signal;  // one received after the verdict was known
  std::optional<TimePoint> m_drain_deadline;
  std::optional<TimePoint> m_sweep_at;  // k_sweep_after past the start of finishing
  int m_swept = 0;                      // leftovers the finishing sweep killed this round
  std::optional<std::vector<RankOutcome>> m_gathered;
  // The run cannot go on (exit code, message); it ends once the other nodes
  // were told, or the store did not answer in time.
  std::optional<std::pair<int, std::string>> m_pending_error;
  std::optional<TimePoint> m_report_deadline;  // this node's empty results sent, until

  int m_round = 0;     // 0, then one more each time the nodes meet again
  int m_restarts = 0;  // the restarts counted against --max-restarts
  // Restarts of rounds without progress (--restart-min-progress), all of them:
  // with m_restarts, TORCHELASTIC_RESTART_COUNT (a restarted worker can tell).
  int m_no_progress_restarts = 0;
  // --restart-min-progress: failed rounds without progress in a row (the
  // job's), and this round's progress events on this node.
  int m_no_progress = 0;
  bool m_stalled = false;                   // the job ends: its rounds without progress are spent
  std::vector<NodeReplacement> m_replaced;  // the spares this round started with
  std::string m_preempted_by;               // --preempt-signal: who received it, for the report
  HealthCheck m_health_check;
  GpuReleaseWait m_gpu_release_wait;
  std::vector<RoundObserver*> m_observers;
  std::vector<long long> m_progress_writes;  // each rank's writes to DDPLAUNCH_PROGRESS_FD
  double m_agent_began = 0;                  // wall time start() was called
  long long m_round_progress = 0;  // round_progress(), kept once the round stopped running
  bool m_progress_frozen = false;
  bool m_progress_reported = false;
  std::vector<RoundSummary> m_rounds;  // the rounds that ended in a restart
  // --hang-timeout: each rank's last progress; the rank found hung, how long
  // it had shown none, and when it is killed if SIGABRT did not end it.
  std::vector<TimePoint> m_last_progress;
  // Each rank's streams not read for backpressure, and since when.
  std::vector<int> m_streams_paused;
  std::vector<TimePoint> m_paused_since;
  struct Hung {
    std::vector<std::pair<int, double>> ranks;  // local rank, seconds without progress
    TimePoint kill_at;  // SIGABRT when debuggers are still printing, then SIGKILL
    int dumping = 0;    // debuggers still printing native stacks
  };
  std::optional<Hung> m_hung;
  bool m_stopped_by_command = false;  // SignalFrom::k_stopped_by_command

  // The round's MPI side over the MPI room (none with --no-pmix).
  std::optional<MpiRound> m_mpi;

  bool m_advancing = false;
  bool m_again = false;
  JobSummary m_summary;
  std::optional<std::string> m_error;
};

}  // namespace ddplaunch
