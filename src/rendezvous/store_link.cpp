// StoreLink: what node 0's HostLink and every MemberLink share once the
// job has begun: the round's verdict, heartbeats, results, a lost store
// (joining's first steps are in store_link_join.cpp).
#include "rendezvous/store_link.hpp"

#include <utility>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;
// How long a node other than node 0 waits for its results to be acknowledged.
constexpr auto k_result_ack_wait = Ms(1000);

}  // namespace

StoreLink::StoreLink(const Config& config, StoreAddress address, StoreConnection& connection,
                     const Clock& clock)
    : m_config(config),
      m_address(std::move(address)),
      m_store(connection),
      m_clock(clock),
      m_where(m_address.host + ":" + std::to_string(m_address.port)) {}

std::string StoreLink::seconds_text(double s) {
  return std::to_string(static_cast<long long>(s));
}

void StoreLink::begin_round(const Topology& topology, int node_rank) {
  m_phase = Phase::k_running;
  m_node_rank = node_rank;
  m_nnodes = topology.nnodes();
  m_next_tick = now();
  round_starting(topology, m_next_tick);
  m_listener->on_joined(topology, node_rank, m_round);
  if (auto verdict = std::exchange(m_deferred, std::nullopt)) {
    deliver(*verdict);
  }
}

void StoreLink::tick(TimePoint t) {
  m_next_tick = t + millis(m_config.heartbeat_interval_s);
  if (m_verdict_delivered) {
    return;
  }
  if (!m_beat_outstanding) {
    m_beat_outstanding = true;
    m_store.add(keys::heartbeat(m_round.round, m_node_rank), 1,
                [this](int64_t) { m_beat_outstanding = false; });
  }
  on_tick(t);
}

void StoreLink::deliver(const JobVerdict& verdict) {
  if (m_verdict_delivered || m_phase == Phase::k_done) {
    return;
  }
  m_verdict_delivered = true;
  m_verdict_exit = verdict.exit_code;
  if (m_phase == Phase::k_running) {
    verdict_arrived();
  }
  if (verdict.lost >= 0) {
    m_lost.insert(verdict.lost);  // its results will not come
  }
  m_listener->on_verdict(verdict);
}

void StoreLink::publish_stop(const JobVerdict& verdict) {
  if (m_waiting) {
    deliver(verdict);  // not part of the job: this node alone leaves
    return;
  }
  if (m_phase == Phase::k_idle || m_store.failed()) {
    return;  // the agent goes on with its own verdict
  }
  const int round = m_round.round;
  if (verdict.progress == 0) {
    // This node's ranks made too little progress; another node's may have
    // (often rank 0 alone prints): the store's counter says, once, for the
    // verdict every node reads.
    m_store.add(keys::progress(round), 0, [this, verdict, round](int64_t nodes) {
      JobVerdict seen = verdict;
      seen.progress = nodes > 0 ? 1 : 0;
      if (round == m_round.round) {
        compare_set_stop(seen, round);
      }
    });
    return;
  }
  compare_set_stop(verdict, round);
}

void StoreLink::report_progress() {
  if (m_phase != Phase::k_running || m_store.failed()) {
    return;
  }
  m_store.add(keys::progress(m_round.round), 1, [](int64_t) {});
}

void StoreLink::compare_set_stop(const JobVerdict& verdict, int round) {
  m_store.compare_set(keys::stop(round), std::nullopt, encode_verdict(verdict),
                      [this, verdict, round](const std::string& current) {
                        if (round != m_round.round) {
                          return;
                        }
                        m_stop_confirmed = true;
                        try {
                          deliver(decode_verdict(current));
                        } catch (const RecordError& e) {
                          log::warn(
                              "the store holds a malformed job/stop record ({}); going on "
                              "with this node's verdict",
                              e.what());
                          deliver(verdict);
                        }
                      });
}

void StoreLink::publish_success() {
  const int round = m_round.round;
  m_store.add(keys::succeeded(round), 1, [this, round](int64_t done) {
    if (done == m_nnodes && round == m_round.round) {
      JobVerdict success;
      success.node = m_node_rank;
      m_store.compare_set(keys::stop(round), std::nullopt, encode_verdict(success),
                          [](const std::string&) {});  // the watch delivers it
    }
  });
}

void StoreLink::abandon() {
  if (m_phase != Phase::k_running || m_store.failed()) {
    m_abandoned = true;
    return;
  }
  m_phase = Phase::k_done;  // nothing more reaches the listener
  m_store.set(keys::result(m_round.round, m_node_rank), encode_outcomes({}),
              [this] { m_abandoned = true; });
}

void StoreLink::finish(const std::vector<RankOutcome>& local) {
  m_local = local;
  const bool running = m_phase == Phase::k_running;
  m_phase = Phase::k_finishing;
  if (!running || m_store.failed()) {
    finished(local);
    return;
  }
  if (!hosts_store()) {
    // Node 0 may be gone or frozen by now: the results are sent, and their
    // acknowledgement awaited only briefly.
    m_finish_deadline = now() + k_result_ack_wait;
  }
  m_store.set(keys::result(m_round.round, m_node_rank), encode_outcomes(local),
              [this] { results_sent(); });
}

// The verdict restarts the job: this node's workers have ended. It says so
// (its round results), and the next round's keys take over at once, so a
// stop published from here on (a signal, a node that does not come) ends the
// next round on every node. Node 0 starts the round once every node's
// workers have ended, with a fresh MASTER_PORT (the old one may be in
// TIME_WAIT or held by a dying rank).
void StoreLink::next_round(const std::vector<RankOutcome>& local, const RoundStart& next) {
  if (m_phase != Phase::k_running || m_store.failed()) {
    // The store went away after the verdict (node 0 gone): no next round.
    m_phase = Phase::k_joining;
    join_failed(k_exit_node_lost,
                "lost contact with the store at " + m_where + " before the restart" +
                    (m_store.failed() ? ": " + m_store.last_error().message : std::string()));
    return;
  }
  const int ended = m_round.round;
  m_round = next;
  std::set<int> lost = std::exchange(m_lost, {});
  m_phase = Phase::k_joining;
  m_verdict_delivered = false;
  m_verdict_exit = 0;
  m_deferred.reset();
  m_stop_confirmed = false;
  m_beat_outstanding = false;
  m_start = now();
  m_next_progress = m_start + k_progress_every;
  // Every node's workers stop within the grace period, then drain; a node
  // that has not come by then is gone.
  m_round_deadline = m_start + millis(m_config.term_timeout_s + m_config.heartbeat_timeout_s + 5);
  log::debug("round {} ended: meeting the other nodes for round {}", ended, m_round.round);
  watch_verdict();
  round_starting_soon();
  m_store.set(keys::result(ended, m_node_rank), encode_outcomes(local),
              [this, ended, lost = std::move(lost)] { round_ended(ended, lost); });
}

void StoreLink::join_failed(int exit_code, const std::string& message) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  m_phase = Phase::k_done;
  m_listener->on_join_failed(exit_code, message);
}

void StoreLink::finished(std::vector<RankOutcome> ranks) {
  if (m_phase == Phase::k_done) {
    return;
  }
  m_phase = Phase::k_done;
  m_listener->on_finished(std::move(ranks));
}

std::optional<StoreLink::TimePoint> StoreLink::deadline() const {
  switch (m_phase) {
    case Phase::k_joining:
      return m_rejoin_at ? std::min(*m_rejoin_at, m_next_progress) : m_next_progress;
    case Phase::k_running:
      return m_next_tick;
    case Phase::k_finishing:
      return m_finish_deadline;
    case Phase::k_idle:
    case Phase::k_done:
      break;
  }
  return std::nullopt;
}

void StoreLink::on_time(TimePoint t) {
  if (m_phase == Phase::k_finishing && m_finish_deadline && t >= *m_finish_deadline) {
    log::debug("node 0 did not acknowledge this node's results in time; leaving");
    finished(m_local);
  }
  if (m_phase == Phase::k_joining && m_rejoin_at && t >= *m_rejoin_at) {
    rejoin();
  }
  if (m_phase == Phase::k_joining && t >= m_next_progress) {
    progress(t);
  }
  if (m_phase == Phase::k_running && t >= m_next_tick) {
    tick(t);
  }
}

void StoreLink::progress(TimePoint t) {
  m_next_progress = t + k_progress_every;
  const auto waited = std::chrono::duration_cast<std::chrono::seconds>(t - m_start).count();
  if (m_waiting) {
    log::info("waiting to be admitted: the job runs without this node ({} s)", waited);
  } else if (m_round.round > 0) {
    log::info("waiting for every node to end round {}'s workers ({} s)", m_round.round - 1, waited);
  } else if (m_store.connecting()) {
    log::info("connecting to the store at {} (attempt {}, {} s)", m_where, m_store.attempts(),
              waited);
  } else {
    report_progress(waited);
  }
}

void StoreLink::store_lost(const StoreConnection::Error& error) {
  const std::string& why = error.message;
  switch (m_phase) {
    case Phase::k_idle:
    case Phase::k_done:
      return;
    case Phase::k_joining:
      if (m_verdict_delivered) {
        return;
      }
      if (m_waiting) {
        join_failed(k_exit_rendezvous,
                    "the store at " + m_where +
                        " closed while this node waited to be admitted: the job ended (or node 0 "
                        "was lost) without it; " +
                        why);
        return;
      }
      if (m_deferred) {
        // The round began (and the store went) before node 0 answered this node.
        join_failed(k_exit_rendezvous,
                    "the job's round began and the store at " + m_where +
                        " closed before node 0's answer reached this node: more agents joined "
                        "than --nnodes " +
                        std::to_string(m_config.nnodes) +
                        " (is it started twice?), or node 0 was lost; " + why);
        return;
      }
      if (error.kind == StoreConnection::Failure::k_lost && !hosts_store() &&
          m_join_step != JoinStep::k_answered && !m_preflight_topology) {
        // Not part of the job yet: node 0 counts on nothing from this
        // connection, so it is tried again, like a failed connect, until
        // --rdzv-timeout.
        const auto t = now();
        if (t + m_rejoin_backoff < m_deadline) {
          log::info(
              "the store at {} closed this node's connection before it was part of the job "
              "({}): joining again",
              m_where, why);
          m_rejoin_at = t + m_rejoin_backoff;
          m_rejoin_backoff = std::min(m_rejoin_backoff * 2, Ms(1000));
          return;
        }
      }
      switch (error.kind) {
        case StoreConnection::Failure::k_refused:
          join_failed(k_exit_rendezvous, "rendezvous failed: " + why);
          return;
        case StoreConnection::Failure::k_unreachable:
          join_failed(k_exit_rendezvous, why + " within --rdzv-timeout " +
                                             seconds_text(m_config.rdzv_timeout_s) +
                                             " s; is ddplaunch running on node 0 with the same "
                                             "--master-addr/--master-port?");
          return;
        case StoreConnection::Failure::k_lost:
        case StoreConnection::Failure::k_rejected:
          join_failed(k_exit_node_lost, "rendezvous failed: " + why);
          return;
      }
      return;
    case Phase::k_running:
      deliver(JobVerdict{k_exit_node_lost,
                         "lost contact with the store at " + m_where +
                             " (node 0's agent exited or its host is unreachable): " + why,
                         std::nullopt, -1});
      return;
    case Phase::k_finishing:
      log::debug("store gone while reporting results: {}", why);
      finished(m_local);
      return;
  }
}

}  // namespace ddplaunch
