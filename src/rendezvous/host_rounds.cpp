// HostLink while rounds run and end: the nodes' heartbeats, every node's
// results at the end, and the step from one round to the next (a restart, or
// an elastic job's regroup: the nodes that remain and those that waited).
#include <algorithm>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "rendezvous/host_link.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;

}  // namespace

// Node 0 watches every node's heartbeats (in a round whose heartbeats go
// up the tree, the agents' TreeRoom narrows it to its children's).
void HostLink::round_starting(const Topology&, TimePoint) {
  std::vector<int> every(static_cast<size_t>(m_nnodes));
  for (int n = 0; n < m_nnodes; ++n) {
    every[static_cast<size_t>(n)] = n;
  }
  watch_beats(nullptr, std::move(every));
  maybe_regroup();  // nodes that came while this round formed
}

// Every node started the round: a regroup now reaches each.
void HostLink::all_started() {
  m_all_started = m_round.round;
  maybe_regroup();
}

void HostLink::results_sent() {
  collect_results();
}

// Node 0 keeps the store up until every live node has reported (bounded).
void HostLink::collect_results() {
  std::vector<std::string> live;
  for (int n = 0; n < m_nnodes; ++n) {
    if (!m_lost.contains(n)) {
      live.push_back(keys::result(m_round.round, n));
    }
  }
  const auto limit = millis(std::min(m_config.heartbeat_timeout_s, 30.0));
  log::debug("waiting for every node's results");
  m_store.wait(live, limit, [this](bool all) {
    if (!all) {
      log::warn("not every node reported its ranks' outcomes before the store shut down");
    }
    std::vector<std::string> every;
    for (int n = 0; n < m_nnodes; ++n) {
      every.push_back(keys::result(m_round.round, n));
    }
    m_store.multi_get(every, [this](std::vector<std::optional<std::string>> values) {
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

// Every remaining node's results of the round that ended, then the next round.
void HostLink::round_ended(int ended, const std::set<int>& lost) {
  m_gone = lost;
  collect_results(ended);
  // A member's last word can come before this node's own workers had ended
  // (the next round's stop key is watched from next_round on): it was kept
  // for the round's start, which would wait for that member's results until
  // the restart's deadline. It is taken now, as if it came while collecting.
  if (auto early = std::exchange(m_deferred, std::nullopt)) {
    verdict_while_joining(*early);
  }
}

// Waits for the results of every node of round `ended` that is not gone.
void HostLink::collect_results(int ended) {
  m_collecting = ended;
  const int generation = ++m_collect_generation;
  std::vector<std::string> all;
  for (int n = 0; n < m_nnodes; ++n) {
    if (!m_gone.contains(n)) {
      all.push_back(keys::result(ended, n));
    }
  }
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(m_round_deadline - now()));
  m_store.wait(all, wait, [this, ended, generation](bool every) {
    if (m_phase != Phase::k_joining || m_verdict_delivered || generation != m_collect_generation) {
      return;
    }
    m_collecting = -1;
    if (every) {
      form_next_round();
      return;
    }
    std::vector<std::string> results;
    for (int n = 0; n < m_nnodes; ++n) {
      results.push_back(keys::result(ended, n));
    }
    m_store.multi_get(results, [this, ended](std::vector<std::optional<std::string>> values) {
      missing_at_restart(ended, values);
    });
  });
}

// A node's last word came while its results for the restart are awaited:
// its agent was killed (or left, failing its health check) while its
// workers stopped. A fixed-size job cannot go on without it, and ends now,
// not after the restart's deadline; an elastic one stops waiting for it and
// goes on without it (a spare in its place): the word, on the next round's
// stop key, must not end that round, so node 0 clears the key before the
// round's plan (publish_round) and the plan says so.
void HostLink::verdict_while_joining(const JobVerdict& verdict) {
  if (m_collecting >= 0 && verdict.lost >= 0 && !verdict.root_cause && !verdict.success()) {
    if (!m_config.elastic()) {
      m_collecting = -1;
      deliver(verdict);
      return;
    }
    m_clear_stop = true;
    if (m_gone.insert(verdict.lost).second) {
      collect_results(m_collecting);
    }
    return;
  }
  StoreLink::verdict_while_joining(verdict);
}

// Nodes whose workers had not ended by the restart's deadline: a
// fixed-size job cannot go on without them; an elastic one leaves them out.
void HostLink::missing_at_restart(int ended,
                                  const std::vector<std::optional<std::string>>& results) {
  if (m_phase != Phase::k_joining || m_verdict_delivered) {
    return;
  }
  std::string missing;
  for (int n = 0; n < m_nnodes; ++n) {
    if (!m_gone.contains(n) && !results.at(static_cast<size_t>(n))) {
      missing +=
          (missing.empty() ? "node " : ", node ") + std::to_string(n) + " (" + host_of(n) + ")";
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

// Every remaining node's workers of the last round have ended: the next
// round is formed of them and of the nodes that waited (but those that left).
void HostLink::form_next_round() {
  // Fewer than MIN nodes, counting the spares that take lost nodes' places
  // (a fixed-size N:N job goes on only with them), end the job.
  auto too_few = [this](int nodes) {
    publish_stop(JobVerdict{k_exit_node_lost,
                            "only " + std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s") +
                                " remain, fewer than --nnodes " + m_config.nnodes_range() +
                                " allows: the job cannot go on",
                            std::nullopt, m_node_rank});
  };
  const int remain = m_planner->remaining(m_gone);
  const int could = remain + static_cast<int>(m_planner->waiting().size());
  if (std::min(could, m_planner->max_nodes()) < m_planner->min_nodes()) {
    too_few(remain);
    return;
  }
  auto publish = [this, too_few](const std::set<int>& left) {
    RoundAssignment plan = m_planner->next_round(m_gone, left, m_address.host, worker_port());
    if (plan.topology.nnodes() < m_planner->min_nodes()) {
      too_few(plan.topology.nnodes());  // the spares counted on had gone
      return;
    }
    publish_round(std::move(plan));
  };
  std::vector<int> waiting;
  std::vector<std::string> left_keys;
  for (const auto& r : m_planner->waiting()) {
    waiting.push_back(r.arrival);
    left_keys.push_back(keys::left(r.arrival));
  }
  if (waiting.empty()) {
    publish({});
    return;
  }
  m_store.multi_get(left_keys, [this, waiting, publish](std::vector<std::optional<std::string>> v) {
    if (m_phase != Phase::k_joining || m_verdict_delivered) {
      return;
    }
    std::set<int> left;
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (v.at(i)) {
        left.insert(waiting[i]);
      }
    }
    publish(left);
  });
}

// Each member's node rank and each admitted node's admission, then the plan
// they wait for (the store carries out a connection's writes in order).
void HostLink::publish_round(RoundAssignment plan) {
  const int round = m_round.round;
  for (size_t arrival = 0; arrival < plan.node_rank_of_arrival.size(); ++arrival) {
    if (const int rank = plan.node_rank_of_arrival[arrival]; rank >= 0) {
      m_store.set(keys::round_rank(round, static_cast<int>(arrival)), encode_assignment(rank),
                  [] {});
    }
  }
  for (const int arrival : plan.admitted) {
    m_store.set(keys::admit(arrival), encode_admission(Admission{round, ""}), [] {});
  }
  if (plan.topology.nnodes() != m_nnodes || !plan.admitted.empty()) {
    log::info("round {} runs on {} node{} ({} left, {} joined)", round, plan.topology.nnodes(),
              plan.topology.nnodes() == 1 ? "" : "s", m_gone.size(), plan.admitted.size());
  }
  for (const auto& x : plan.replaced) {
    log::info("round {}: spare {} takes the place of node {} ({}), lost", round, x.spare,
              x.node_rank, x.lost);
  }
  m_round.replaced = plan.replaced;
  const int node_rank = plan.node_rank_of_arrival.at(static_cast<size_t>(m_self.arrival));
  TopologyRecord record{std::move(plan.topology), "", m_round.restarts, m_round.no_progress};
  record.replaced = std::move(plan.replaced);
  if (std::exchange(m_clear_stop, false)) {
    // A left-out node's last word: gone before the plan (this connection's
    // requests are carried out in order), and watched for afresh.
    m_store.erase(keys::stop(round), [] {});
    m_deferred.reset();
    watch_verdict();
    record.stop_cleared = true;
  }
  const std::string text = encode_plan(record);
  m_store.set(keys::round_plan(round), text,
              [this, topology = std::move(*record.topology), node_rank] {
                start_job(topology, node_rank);
              });
}

// The job ends: the nodes still waiting to be admitted are told so.
void HostLink::tell_waiting(std::function<void()> then) {
  const std::vector<int> waiting = m_planner ? m_planner->drop_waiting() : std::vector<int>{};
  if (waiting.empty()) {
    then();
    return;
  }
  for (size_t i = 0; i < waiting.size(); ++i) {
    const bool last = i + 1 == waiting.size();
    m_store.set(keys::admit(waiting[i]),
                encode_admission(Admission{
                    0,
                    "the job ended before this node could be admitted (a node that joins a "
                    "running elastic job waits for its next round, which starts at once only "
                    "while --max-restarts remain and fewer than MAX nodes run)",
                    m_verdict_exit}),
                [then, last] {
                  if (last) {
                    then();
                  }
                });
  }
}

}  // namespace ddplaunch
