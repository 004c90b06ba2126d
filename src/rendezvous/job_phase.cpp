// StoreLink's run and finishing phases: heartbeats, the job's verdict, and
// every node's results.
#include <algorithm>
#include <charconv>

#include "ddplaunch/error.hpp"
#include "log.hpp"
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
  m_listener->on_joined(topology, node_rank);
}

void StoreLink::tick(TimePoint now) {
  m_next_tick = now + millis(m_config.heartbeat_interval_s);
  if (m_verdict_delivered) {
    return;
  }
  if (!m_beat_outstanding) {
    m_beat_outstanding = true;
    m_rpc->add(keys::heartbeat(m_node_rank), 1, [this](int64_t) { m_beat_outstanding = false; });
  }
  if (m_server && !m_check_outstanding) {
    std::vector<std::string> ks;
    for (int n = 0; n < m_nnodes; ++n) {
      ks.push_back(keys::heartbeat(n));
      ks.push_back(keys::result(n));
    }
    m_check_outstanding = true;
    m_rpc->multi_get(ks, [this](std::vector<std::optional<std::string>> values) {
      m_check_outstanding = false;
      check_heartbeats(values, Clock::now());
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
  for (int n = 0; n < m_nnodes; ++n) {
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
                     std::nullopt, m_node_rank});
      return;
    }
  }
}

void StoreLink::deliver(const JobVerdict& verdict) {
  if (m_verdict_delivered || m_phase == Phase::k_done) {
    return;
  }
  m_verdict_delivered = true;
  m_listener->on_verdict(verdict);
}

void StoreLink::publish_stop(const JobVerdict& verdict) {
  if (!m_rpc || m_rpc->state() == AsyncClient::State::k_failed) {
    return;  // the agent goes on with its own verdict
  }
  m_rpc->compare_set(keys::k_stop, std::nullopt, encode_verdict(verdict),
                     [this, verdict](const std::string& current) {
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
  m_rpc->add(keys::k_succeeded, 1, [this](int64_t done) {
    if (done == m_nnodes) {
      JobVerdict success;
      success.node = m_node_rank;
      m_rpc->compare_set(keys::k_stop, std::nullopt, encode_verdict(success),
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
  m_rpc->set(keys::result(m_node_rank), encode_outcomes({}), [this] { m_abandoned = true; });
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
  m_rpc->set(keys::result(m_node_rank), encode_outcomes(local), [this] {
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
      live.push_back(keys::result(n));
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
      every.push_back(keys::result(n));
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
      finished(std::move(all_ranks));
    });
  });
}

void StoreLink::finished(std::vector<RankOutcome> ranks) {
  if (m_phase == Phase::k_done) {
    return;
  }
  m_phase = Phase::k_done;
  m_listener->on_finished(std::move(ranks));
}

}  // namespace ddplaunch
