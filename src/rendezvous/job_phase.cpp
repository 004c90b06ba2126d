// StoreLink's run and finishing phases: heartbeats, the job's verdict, every
// node's results, and the step from one round to the next.
#include <algorithm>
#include <charconv>
#include <utility>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "posix/net.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"
#include "rendezvous/store_link.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;
// How long a node other than node 0 waits for its results to be acknowledged.
constexpr auto k_result_ack_wait = Ms(1000);

}  // namespace

void StoreLink::start_job(const Topology& topology, int node_rank) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  m_phase = Phase::k_running;
  m_node_rank = node_rank;
  m_topology = topology;
  m_nnodes = topology.nnodes();
  const auto now = Clock::now();
  m_next_tick = now;
  if (m_server) {  // only the store host watches every node, and it knows them all
    m_hosts.assign(static_cast<size_t>(m_nnodes), "");
    for (const auto& n : topology.nodes) {
      m_hosts.at(static_cast<size_t>(n.node_rank)) = n.host;
    }
    m_last_beat.assign(static_cast<size_t>(m_nnodes), {-1, now});
  }
  if (m_last_word != std::pair(m_round, m_node_rank)) {
    leave_last_word();  // a survivor's was left when the round began (next_round)
  }
  if (m_server) {
    maybe_regroup();  // nodes that came while this round formed
  }
  m_listener->on_joined(topology, node_rank, RoundStart{m_round, m_restarts});
  if (auto verdict = std::exchange(m_deferred, std::nullopt)) {
    deliver(*verdict);
  }
}

// If this agent's connection closes while the round runs (the agent killed,
// its host rebooted), the store itself publishes that this node was
// lost: every node hears it at once, not after the heartbeat timeout. A
// verdict already there (this node's own end) makes it a no-op.
void StoreLink::leave_last_word() {
  if (m_server) {
    return;  // the store goes with this agent: every other node notices that at once
  }
  m_last_word = {m_round, m_node_rank};
  const std::string who = "node " + std::to_string(m_node_rank) + " (" + m_self.host + ")";
  JobVerdict lost{k_exit_node_lost,
                  who +
                      " was lost: its agent's connection to the store closed (the agent was "
                      "killed, or its host rebooted)",
                  std::nullopt, m_node_rank, m_node_rank};
  m_rpc->request(protocol::request::on_close(keys::stop(m_round), encode_verdict(lost)),
                 AsyncClient::Duration(0), [](const protocol::Reply&) {});
}

void StoreLink::tick(TimePoint now) {
  m_next_tick = now + millis(m_config.heartbeat_interval_s);
  if (m_verdict_delivered) {
    return;
  }
  if (!m_beat_outstanding) {
    m_beat_outstanding = true;
    m_rpc->add(keys::heartbeat(m_round, m_node_rank), 1,
               [this](int64_t) { m_beat_outstanding = false; });
  }
  if (m_server && !m_check_outstanding) {
    std::vector<std::string> ks;
    for (int n = 0; n < m_nnodes; ++n) {
      ks.push_back(keys::heartbeat(m_round, n));
      ks.push_back(keys::result(m_round, n));
    }
    m_check_outstanding = true;
    m_rpc->multi_get(ks, [this, round = m_round](std::vector<std::optional<std::string>> values) {
      m_check_outstanding = false;
      if (round == m_round && m_phase == Phase::k_running) {
        check_heartbeats(values, Clock::now());
      }
    });
  }
}

// The store host notices nodes whose heartbeat counter stopped moving.
void StoreLink::check_heartbeats(const std::vector<std::optional<std::string>>& values,
                                 TimePoint now) {
  if (m_verdict_delivered) {
    return;
  }
  const auto limit = millis(m_config.heartbeat_timeout_s);
  bool all_started = true;
  for (int n = 0; n < m_nnodes; ++n) {
    all_started = all_started && (values.at(static_cast<size_t>(2 * n)) ||
                                  values.at(static_cast<size_t>(2 * n + 1)));
    if (values.at(static_cast<size_t>(2 * n + 1))) {
      continue;  // it finished and reported
    }
    const auto& beat = values.at(static_cast<size_t>(2 * n));
    long long count = 0;
    if (beat) {
      std::from_chars(beat->data(), beat->data() + beat->size(), count);
    }
    auto& [last, when] = m_last_beat[static_cast<size_t>(n)];
    if (count != last) {
      last = count;
      when = now;
    } else if (now - when >= limit) {
      m_lost.insert(n);
      publish_stop(
          JobVerdict{k_exit_node_lost,
                     "node " + std::to_string(n) + " (" + m_hosts.at(static_cast<size_t>(n)) +
                         ") was lost: no heartbeat for " +
                         std::to_string(static_cast<int>(m_config.heartbeat_timeout_s)) + " s",
                     std::nullopt, m_node_rank, n});
      return;
    }
  }
  if (all_started && m_all_started != m_round) {
    m_all_started = m_round;
    maybe_regroup();
  }
}

void StoreLink::deliver(const JobVerdict& verdict) {
  if (m_verdict_delivered || m_phase == Phase::k_done) {
    return;
  }
  m_verdict_delivered = true;
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
  if (!m_rpc || m_rpc->state() == AsyncClient::State::k_failed) {
    return;  // the agent goes on with its own verdict
  }
  m_rpc->compare_set(keys::stop(m_round), std::nullopt, encode_verdict(verdict),
                     [this, verdict, round = m_round](const std::string& current) {
                       if (round != m_round) {
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
  m_rpc->add(keys::succeeded(m_round), 1, [this, round = m_round](int64_t done) {
    if (done == m_nnodes && round == m_round) {
      JobVerdict success;
      success.node = m_node_rank;
      m_rpc->compare_set(keys::stop(round), std::nullopt, encode_verdict(success),
                         [](const std::string&) {});  // the watch delivers it
    }
  });
}

void StoreLink::abandon() {
  if (m_phase != Phase::k_running || !m_rpc || m_rpc->state() == AsyncClient::State::k_failed) {
    m_abandoned = true;
    return;
  }
  m_phase = Phase::k_done;  // nothing more reaches the listener
  m_rpc->set(keys::result(m_round, m_node_rank), encode_outcomes({}),
             [this] { m_abandoned = true; });
}

void StoreLink::finish(const std::vector<RankOutcome>& local) {
  m_local = local;
  if (m_phase != Phase::k_running || m_rpc->state() == AsyncClient::State::k_failed) {
    m_phase = Phase::k_finishing;
    finished(local);
    return;
  }
  m_phase = Phase::k_finishing;
  if (!m_server) {
    // Node 0 may be gone or frozen by now: the results are sent, and their
    // acknowledgement awaited only briefly.
    m_finish_deadline = Clock::now() + k_result_ack_wait;
  }
  m_rpc->set(keys::result(m_round, m_node_rank), encode_outcomes(local), [this] {
    if (m_server) {
      collect_results();
    } else {
      finished(m_local);
    }
  });
}

// The store host keeps the store up until every live node has reported (bounded).
void StoreLink::collect_results() {
  std::vector<std::string> live;
  for (int n = 0; n < m_nnodes; ++n) {
    if (!m_lost.contains(n)) {
      live.push_back(keys::result(m_round, n));
    }
  }
  const auto limit = millis(std::min(m_config.heartbeat_timeout_s, 30.0));
  log::debug("waiting for every node's results");
  m_wait->wait(live, limit, [this](bool all) {
    if (!all) {
      log::warn("not every node reported its ranks' outcomes before the store shut down");
    }
    std::vector<std::string> every;
    for (int n = 0; n < m_nnodes; ++n) {
      every.push_back(keys::result(m_round, n));
    }
    m_rpc->multi_get(every, [this](std::vector<std::optional<std::string>> values) {
      std::vector<RankOutcome> all_ranks = m_local;
      for (int n = 0; n < m_nnodes; ++n) {
        const auto& v = values.at(static_cast<size_t>(n));
        if (n == m_node_rank || !v) {
          continue;
        }
        try {
          auto theirs = decode_outcomes(*v);
          all_ranks.insert(all_ranks.end(), theirs.begin(), theirs.end());
        } catch (const RecordError& e) {
          log::warn("node {} reported malformed results: {}", n, e.what());
        }
      }
      std::sort(all_ranks.begin(), all_ranks.end(),
                [](const RankOutcome& a, const RankOutcome& b) { return a.rank < b.rank; });
      tell_waiting([this, all_ranks]() mutable { finished(std::move(all_ranks)); });
    });
  });
}

// The verdict restarts the job: this node's workers have ended. It says so
// (its round results), and the next round's keys take over at once, so a
// stop published from here on (a signal, a node that does not come) ends the
// next round on every node. Node 0 starts the round once every node's
// workers have ended, with a fresh MASTER_PORT (the old one may be in
// TIME_WAIT or held by a dying rank).
void StoreLink::next_round(const std::vector<RankOutcome>& local, int restarts) {
  const AsyncClient* failed = nullptr;
  for (const auto* c : {m_rpc.get(), m_watch.get(), m_wait.get(), m_arrivals.get()}) {
    if (c == nullptr) {
      continue;
    }
    if (c->state() == AsyncClient::State::k_failed) {
      failed = c;
    }
  }
  if (m_phase != Phase::k_running || failed != nullptr) {
    // The store went away after the verdict (node 0 gone): no next round.
    m_phase = Phase::k_joining;
    join_failed(k_exit_node_lost, "lost contact with the store at " + m_where +
                                      " before the restart" +
                                      (failed != nullptr ? ": " + failed->error() : std::string()));
    return;
  }
  const int ended = m_round;
  ++m_round;
  m_restarts = restarts;
  m_gone = std::move(m_lost);
  m_phase = Phase::k_joining;
  m_verdict_delivered = false;
  m_deferred.reset();
  m_stop_confirmed = false;
  m_beat_outstanding = false;
  m_check_outstanding = false;
  m_lost.clear();
  m_start = Clock::now();
  m_next_progress = m_start + k_progress_every;
  // Every node's workers stop within the grace period, then drain; a node
  // that has not come by then is gone.
  m_round_deadline = m_start + millis(m_config.term_timeout_s + m_config.heartbeat_timeout_s + 5);
  log::debug("round {} ended: meeting the other nodes for round {}", ended, m_round);
  watch_verdict();
  leave_last_word();
  m_rpc->set(keys::result(ended, m_node_rank), encode_outcomes(local), [this, ended] {
    if (m_server) {
      host_next_round(ended);
    } else {
      wait_for_round_plan();
    }
  });
}

void StoreLink::host_next_round(int ended) {
  std::vector<std::string> all;
  for (int n = 0; n < m_nnodes; ++n) {
    if (!m_gone.contains(n)) {
      all.push_back(keys::result(ended, n));
    }
  }
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(m_round_deadline - Clock::now()));
  m_wait->wait(all, wait, [this, ended](bool every) {
    if (m_phase != Phase::k_joining || m_verdict_delivered) {
      return;
    }
    if (every) {
      form_next_round();
      return;
    }
    std::vector<std::string> results;
    for (int n = 0; n < m_nnodes; ++n) {
      results.push_back(keys::result(ended, n));
    }
    m_rpc->multi_get(results, [this, ended](std::vector<std::optional<std::string>> values) {
      missing_at_restart(ended, values);
    });
  });
}

// Nodes whose workers had not ended by the restart's deadline: a
// fixed-size job cannot go on without them; an elastic one leaves them out.
void StoreLink::missing_at_restart(int ended,
                                   const std::vector<std::optional<std::string>>& results) {
  if (m_phase != Phase::k_joining || m_verdict_delivered) {
    return;
  }
  std::string missing;
  for (int n = 0; n < m_nnodes; ++n) {
    if (!m_gone.contains(n) && !results.at(static_cast<size_t>(n))) {
      missing += (missing.empty() ? "node " : ", node ") + std::to_string(n) + " (" +
                 m_hosts.at(static_cast<size_t>(n)) + ")";
      if (m_config.elastic()) {
        m_gone.insert(n);
      }
    }
  }
  if (m_config.elastic()) {
    log::warn("{} did not end round {}'s workers in time: the next round goes on without it",
              missing, ended);
    form_next_round();
    return;
  }
  publish_stop(JobVerdict{k_exit_node_lost,
                          missing + " did not end round " + std::to_string(ended) +
                              "'s workers in time for the restart",
                          std::nullopt, m_node_rank});
}

void StoreLink::wait_for_round_plan() {
  const auto wait = std::max(
      Ms(1), std::chrono::ceil<Ms>(m_round_deadline - Clock::now()) + std::chrono::seconds(5));
  m_wait->get(keys::round_plan(m_round), wait,
              [this](std::optional<std::string> text) { take_round_plan(text); });
}

void StoreLink::finished(std::vector<RankOutcome> ranks) {
  if (m_phase == Phase::k_done) {
    return;
  }
  m_phase = Phase::k_done;
  m_listener->on_finished(std::move(ranks));
}

}  // namespace ddplaunch
