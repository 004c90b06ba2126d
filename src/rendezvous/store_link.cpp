// StoreLink: what node 0's HostLink and every MemberLink share once the
// job has begun: the round's verdict, heartbeats, results, a lost store
// (joining's first steps are in store_link_join.cpp).
#include "rendezvous/store_link.hpp"

#include <algorithm>
#include <utility>

#include "cluster/nodelist.hpp"
#include "config/integer.hpp"
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
  take_hosts(topology);
  m_beat_to = nullptr;
  m_beats_held = false;
  m_count_start = false;
  m_beat_outstanding = false;
  ++m_beat_generation;
  m_watched.clear();
  m_check_outstanding = false;
  ++m_watch_generation;
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
  beat();
  check_beats(t);
}

// As many as the plan had (a member's: often its own alone, so that
// 16,384 nodes simulated in one process cost no 16,384 names each).
void StoreLink::take_hosts(const Topology& topology) {
  m_hosts.clear();
  for (const auto& n : topology.nodes) {
    m_hosts.emplace_back(n.node_rank, n.host);
  }
  std::sort(m_hosts.begin(), m_hosts.end());
  m_host_list = topology.host_list;
}

// The host as the plan said (a member's plan may carry only its own entry
// and the host list); empty if it said none.
std::string StoreLink::host_of(int n) const {
  const auto it = std::lower_bound(m_hosts.begin(), m_hosts.end(), n,
                                   [](const auto& entry, int rank) { return entry.first < rank; });
  std::string host = it != m_hosts.end() && it->first == n ? it->second : "";
  if (host.empty() && !m_host_list.empty()) {
    try {
      const auto hosts = expand_nodelist(m_host_list);
      if (n >= 0 && n < static_cast<int>(hosts.size())) {
        host = hosts[static_cast<size_t>(n)];
      }
    } catch (const std::exception&) {
      // not said: the plan was checked when read
    }
  }
  return host;
}

std::string StoreLink::node_text(int n) const {
  const std::string host = host_of(n);
  return "node " + std::to_string(n) + (host.empty() ? "" : " (" + host + ")");
}

void StoreLink::beat() {
  if (std::exchange(m_count_start, false)) {
    m_store.add(keys::started(m_round.round), 1, [](int64_t) {});
  }
  if (m_beats_held || m_beat_outstanding) {
    return;
  }
  m_beat_outstanding = true;
  StoreConnection& to = m_beat_to != nullptr ? *m_beat_to : m_store;
  to.add(keys::heartbeat(m_round.round, m_node_rank), 1, [this, g = m_beat_generation](int64_t) {
    if (g == m_beat_generation) {
      m_beat_outstanding = false;
    }
  });
}

void StoreLink::beat_up_the_tree() {
  if (m_phase != Phase::k_running) {
    return;
  }
  m_beats_held = true;
  m_count_start = true;
}

void StoreLink::beat_on(StoreConnection* to) {
  if (m_phase != Phase::k_running) {
    return;
  }
  m_beat_to = to;
  m_beats_held = false;
  m_beat_outstanding = false;
  ++m_beat_generation;
}

void StoreLink::watch_beats(StoreConnection* on, std::vector<int> nodes, int counted) {
  m_watch_on = on;
  m_watched = std::move(nodes);
  m_counted = counted;
  m_last_beat.assign(m_watched.size(), {-1, now()});
  m_check_outstanding = false;
  ++m_watch_generation;
}

// The watched nodes' heartbeat counters (on the job's store, their results
// too, and the count of the nodes started below node 0's children).
void StoreLink::check_beats(TimePoint) {
  if (m_watched.empty() || m_check_outstanding) {
    return;
  }
  const bool on_job_store = m_watch_on == nullptr;
  std::vector<std::string> ks;
  for (const int n : m_watched) {
    ks.push_back(keys::heartbeat(m_round.round, n));
    if (on_job_store) {
      ks.push_back(keys::result(m_round.round, n));
    }
  }
  if (m_counted > 0) {
    ks.push_back(keys::started(m_round.round));
  }
  m_check_outstanding = true;
  StoreConnection& on = on_job_store ? m_store : *m_watch_on;
  on.multi_get(ks, [this, g = m_watch_generation](std::vector<std::optional<std::string>> v) {
    if (g != m_watch_generation) {
      return;
    }
    m_check_outstanding = false;
    if (m_phase == Phase::k_running) {
      beats_read(v, now());
    }
  });
}

// Nodes whose heartbeat counter stopped moving are lost.
void StoreLink::beats_read(const std::vector<std::optional<std::string>>& values, TimePoint t) {
  if (m_verdict_delivered) {
    return;
  }
  const bool with_results = m_watch_on == nullptr;
  const size_t stride = with_results ? 2 : 1;
  const auto limit = millis(m_config.heartbeat_timeout_s);
  bool every = true;  // every watched node has started the round
  for (size_t i = 0; i < m_watched.size(); ++i) {
    const int n = m_watched[i];
    const auto& beat = values.at(stride * i);
    const bool reported = with_results && values.at(stride * i + 1).has_value();
    every = every && (beat || reported);
    if (reported) {
      continue;  // it finished and reported
    }
    // A beat that is not a count (a store client's doing) counts as none.
    const long long count = beat ? parse_integer(*beat).value_or(0) : 0;
    auto& [last, when] = m_last_beat[i];
    if (count != last) {
      last = count;
      when = t;
    } else if (t - when >= limit) {
      m_lost.insert(n);  // its results will not come, whichever verdict wins
      // A parent in the tree other than node 0 says it was the one.
      const bool parent = m_node_rank != 0;
      publish_stop(JobVerdict{
          k_exit_node_lost,
          node_text(n) + " was lost: no heartbeat for " +
              std::to_string(static_cast<int>(m_config.heartbeat_timeout_s)) + " s" +
              (parent ? " reached node " + std::to_string(m_node_rank) + ", its parent in the tree"
                      : std::string()),
          std::nullopt, m_node_rank, n});
      return;
    }
  }
  if (m_counted > 0) {
    const auto& counter = values.back();
    every = every && counter && parse_integer(*counter).value_or(0) >= m_counted;
  }
  if (every && m_started_told != m_round.round) {
    m_started_told = m_round.round;
    all_started();
  }
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
