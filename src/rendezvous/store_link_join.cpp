// StoreLink's joining: the arrival and the join record, a connection lost
// before this node is part of the job (joined again), the verdict while
// joining, the round's start and the network preflight's reports.
#include <algorithm>
#include <chrono>
#include <utility>

#include "config/integer.hpp"
#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"
#include "rendezvous/status_relay.hpp"
#include "rendezvous/store_link.hpp"

namespace ddplaunch {

namespace {
using Ms = std::chrono::milliseconds;
}  // namespace

void StoreLink::join(const JoinRecord& self) {
  m_phase = Phase::k_joining;
  m_start = now();
  m_deadline = m_start + millis(m_config.rdzv_timeout_s);
  m_next_progress = m_start + k_progress_every;
  m_self = self;
  m_self.store_host = hosts_store();
  log::debug("joining the job through the store at {}", m_where);
  m_store.set_failure_handler([this](const StoreConnection::Error& e) { store_lost(e); });
  if (m_store.failed()) {
    store_lost(m_store.last_error());  // failed at once: the host does not resolve
    return;
  }
  watch_verdict();  // it can come at any phase, rendezvous included
  take_arrival();
}

void StoreLink::take_arrival() {
  m_join_step = JoinStep::k_adding;
  m_store.add(keys::k_arrivals, 1, [this](int64_t n) { record_arrival(static_cast<int>(n - 1)); });
}

// The join record goes under the arrival unless a node that lost an ADD's
// answer gave that arrival up first (k_vacant_arrival): then it takes another.
void StoreLink::record_arrival(int arrival) {
  m_self.arrival = arrival;
  m_join_step = JoinStep::k_recording;
  std::string record = encode_join(m_self);
  m_store.compare_set(
      keys::node(arrival), std::nullopt, record, [this, record](const std::string& held) {
        if (m_phase != Phase::k_joining) {
          return;
        }
        if (held != record) {
          log::debug("arrival {} was given up meanwhile: joining anew", m_self.arrival);
          take_arrival();
          return;
        }
        m_join_step = JoinStep::k_recorded;
        joined_as(m_self.arrival);
      });
}

// The connection closed before this node was part of the job: a new one
// takes up the joining where it stood. If the ADD went unanswered, the store
// may have counted an arrival that no record will fill, and node 0 reads the
// records in arrival order: every arrival before the new one still without
// a record is given up (compare-and-set, so one whose node writes it first
// stays that node's; a node that finds its own given up joins anew).
void StoreLink::rejoin() {
  m_rejoin_at.reset();
  const auto left = std::max(Ms(1), std::chrono::ceil<Ms>(m_deadline - now()));
  m_store.reconnect(left);
  watch_verdict();
  switch (m_join_step) {
    case JoinStep::k_adding:
      m_store.add(keys::k_arrivals, 1, [this](int64_t n) {
        const int mine = static_cast<int>(n - 1);
        std::vector<std::string> before;
        for (int a = 0; a < mine; ++a) {
          before.push_back(keys::node(a));
        }
        m_store.multi_get(before, [this, mine](std::vector<std::optional<std::string>> records) {
          for (size_t a = 0; a < records.size(); ++a) {
            if (!records[a]) {
              m_store.compare_set(keys::node(static_cast<int>(a)), std::nullopt, k_vacant_arrival,
                                  [](const std::string&) {});
            }
          }
          record_arrival(mine);
        });
      });
      return;
    case JoinStep::k_recording:
    case JoinStep::k_recorded:
      confirm_arrival();
      return;
    case JoinStep::k_answered:
      return;
  }
}

// Whether the store this node reached again still counts its arrival and
// holds its record there: node 0's agent may have been started anew, with
// an empty store, while this node was away. Its own record there: it waits
// for node 0's answer under it; the arrival still counted but without a
// record: it writes it; anything else (a new store, or another node's
// record under that arrival): it joins anew.
void StoreLink::confirm_arrival() {
  const int arrival = m_self.arrival;
  m_store.multi_get(
      {keys::k_arrivals, keys::node(arrival)},
      [this, arrival](std::vector<std::optional<std::string>> got) {
        if (m_phase != Phase::k_joining || arrival != m_self.arrival) {
          return;
        }
        const auto counted = got.at(0) ? parse_integer(*got.at(0)) : std::nullopt;
        const bool still_counted = counted && *counted > arrival;
        if (got.at(1) && *got.at(1) == encode_join(m_self)) {
          m_join_step = JoinStep::k_recorded;
          joined_as(arrival);
        } else if (!got.at(1) && still_counted) {
          record_arrival(arrival);
        } else {
          log::info(
              "the store at {} no longer holds this node's arrival {} (node 0's agent was "
              "started again?): joining anew",
              m_where, arrival);
          take_arrival();
        }
      });
}

// The round's verdict, whenever it comes; one of an earlier round (answered
// after the next round began) is dropped, and so is the GET's answer when
// this node took it back (watch_elsewhere()).
void StoreLink::watch_verdict() {
  const int round = m_round.round;
  m_store.get(keys::stop(round), Ms(0), [this, round](std::optional<std::string> text) {
    if (text) {
      verdict_read(round, *text);
    }
  });
}

void StoreLink::watch_elsewhere(std::function<void()> done) {
  if (m_phase == Phase::k_running && !m_verdict_delivered && !m_store.failed()) {
    m_store.unwatch(keys::stop(m_round.round), std::move(done));
  } else {
    done();
  }
}

void StoreLink::watch_store() {
  if (m_phase == Phase::k_running && !m_verdict_delivered && !m_store.failed()) {
    watch_verdict();
  }
}

void StoreLink::verdict_read(int round, const std::string& text) {
  if (round != m_round.round || m_waiting) {
    return;  // an earlier round's, or one this node is not part of
  }
  try {
    JobVerdict verdict = decode_verdict(text);
    if (verdict.regroup && m_phase == Phase::k_joining) {
      // Published once every node of the round started it: this node is
      // the newcomer, which has not read the plan that leaves it out yet.
      return;
    }
    if (m_phase == Phase::k_joining) {
      verdict_while_joining(verdict);
      return;
    }
    deliver(verdict);
  } catch (const RecordError& e) {
    deliver(JobVerdict{
        k_exit_node_lost,
        "the store holds a malformed " + keys::stop(round) + " record: " + std::string(e.what()),
        std::nullopt, -1});
  }
}

// A verdict for the round this node is still joining. Success, a rank's
// failure or a lost node means the round has begun elsewhere (its plan, and
// every answer, is published before any worker starts): this node reads its
// answer first. A member starts the round too and hears the verdict then, so
// that it restarts with the others instead of ending alone; a node that was
// refused (one too many) ends with its refusal. Any other verdict (a stop
// signal during rendezvous, a node that did not come) ends the joining at
// once.
void StoreLink::verdict_while_joining(const JobVerdict& verdict) {
  if (m_preflight_topology) {
    deliver(verdict);  // the round starts nowhere before every preflight report is in
    return;
  }
  if (verdict.success() || verdict.root_cause || verdict.lost >= 0) {
    m_deferred = verdict;  // delivered by start_job()
  } else {
    deliver(verdict);
  }
}

void StoreLink::start_job(const Topology& topology, int node_rank, bool preflight) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  if (!preflight || topology.nnodes() < 2) {
    begin_round(topology, node_rank);
    return;
  }
  // The network preflight: this node's peers' probe listeners (node 0
  // published them before the plan), then the connects.
  m_node_rank = node_rank;
  m_nnodes = topology.nnodes();
  m_preflight_topology = topology;
  take_hosts(topology);
  round_starting_soon();  // a member's last word: if it goes now, node 0 hears at once
  const auto timeout = millis(m_config.preflight_timeout_s);
  m_preflight_began = now();
  m_preflight_deadline = m_preflight_began + timeout + timeout + std::chrono::seconds(5);
  // Node 0 gathers every node's report, a member reports on the job's
  // store, unless the tree says otherwise (preflight_through_tree()).
  m_pf_children.clear();
  m_pf_subtree.clear();
  if (hosts_store()) {
    for (int n = 0; n < m_nnodes; ++n) {
      if (n != node_rank) {
        m_pf_children.push_back(n);
        m_pf_subtree.push_back(1);
      }
    }
  }
  m_pf_probed = false;
  m_pf_on = nullptr;
  m_pf_until = m_preflight_deadline;
  m_pf_to = nullptr;
  m_pf_held = false;
  m_pf_pending.reset();
  if (m_listener != nullptr) {
    m_listener->on_preflight_start(topology, node_rank, m_round);
  }
  std::vector<int> peers =
      m_probe != nullptr ? preflight_peers(node_rank, m_nnodes) : std::vector<int>{};
  if (m_probe != nullptr && probes_master_port(node_rank, m_nnodes)) {
    peers.push_back(0);  // for node 0's MASTER_PORT (a peer too, maybe)
  }
  std::vector<std::string> ks;
  for (const int peer : peers) {
    ks.push_back(keys::probe(peer));
  }
  m_store.multi_get(
      ks, [this, peers = std::move(peers)](auto values) { probe_peers(std::move(values), peers); });
}

void StoreLink::probe_peers(std::vector<std::optional<std::string>> endpoints,
                            std::vector<int> peers) {
  if (m_phase != Phase::k_joining || m_verdict_delivered) {
    return;
  }
  std::vector<ProbeTarget> targets;
  std::vector<ProbeFailure> failures;
  // Each peer's probe port; node 0's MASTER_PORT from the last record when
  // this node probes it (start_job() asked for node 0's record last).
  const bool master = probes_master_port(m_node_rank, m_nnodes);
  for (size_t i = 0; i < peers.size(); ++i) {
    ProbeEndpoint e;
    try {
      e = decode_probe_endpoint(endpoints.at(i).value_or(""));
    } catch (const RecordError& error) {
      failures.push_back(
          ProbeFailure{ProbeTarget{peers[i], "?", "?", 0, false},
                       std::string("node 0 published no usable probe record: ") + error.what()});
      continue;
    }
    if (master && i + 1 == peers.size()) {
      if (e.master_port > 0) {
        targets.push_back(
            ProbeTarget{0, e.host, m_preflight_topology->master_addr, e.master_port, true});
      }
    } else if (e.port > 0) {
      targets.push_back(ProbeTarget{peers[i], e.host, e.addr, e.port, false});
    }
  }
  if (m_probe == nullptr || targets.empty()) {
    probed(failures);
    return;
  }
  const auto deadline = now() + millis(m_config.preflight_timeout_s);
  m_probe->start(std::move(targets), deadline,
                 [this, failures](std::vector<ProbeFailure> found) mutable {
                   failures.insert(failures.end(), found.begin(), found.end());
                   probed(failures);
                 });
}

void StoreLink::probed(const std::vector<ProbeFailure>& failures) {
  if (m_phase != Phase::k_joining || m_verdict_delivered) {
    return;
  }
  std::vector<std::string> blocked;
  for (const auto& f : failures) {
    blocked.push_back(describe_blocked(m_node_rank, m_self.host, f));
    log::warn("network preflight: {}", blocked.back());
  }
  if (m_listener != nullptr) {
    m_listener->on_preflight(
        m_node_rank, std::chrono::duration<double>(now() - m_preflight_began).count(), blocked);
  }
  m_pf_probed = true;
  ProbeReport own;
  add_to_report(own, blocked);
  gather_reports(std::move(own));
}

void StoreLink::preflight_through_tree(const TreePlace& place, int height, StoreConnection* on) {
  if (!m_preflight_topology) {
    return;
  }
  m_pf_children = place.children;
  m_pf_subtree.clear();
  for (const int child : place.children) {
    m_pf_subtree.push_back(tree_place(child, m_nnodes, m_preflight_topology->tree_fanout).subtree);
  }
  m_pf_on = on;
  // Each level up gathers a little longer, so that a report reaches its
  // parent while the parent still gathers; node 0 until the deadline, the
  // others 2 s less at least (they began after node 0, once they read the
  // plan).
  if (place.parent >= 0) {
    const double total =
        std::chrono::duration<double>(m_preflight_deadline - m_preflight_began).count() - 2;
    m_pf_until = m_preflight_began + gather_time(total, place.depth, height);
  }
  m_pf_held = place.parent > 0;
}

void StoreLink::report_to(StoreConnection* to) {
  if (!m_preflight_topology) {
    return;
  }
  m_pf_to = to;
  m_pf_held = false;
  flush_report();
}

// This node's children's reports, each for its subtree, until all are in
// or this node's time to gather is up.
void StoreLink::gather_reports(ProbeReport own) {
  if (m_pf_children.empty()) {
    preflight_gathered(std::move(own));
    return;
  }
  std::vector<std::string> ks;
  for (const int child : m_pf_children) {
    ks.push_back(keys::probed(child));
  }
  StoreConnection& on = m_pf_on != nullptr ? *m_pf_on : m_store;
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(m_pf_until - now()));
  on.wait(ks, wait, [this, &on, ks, own = std::move(own)](bool) mutable {
    on.multi_get(ks, [this, own = std::move(own)](std::vector<std::optional<std::string>> v) {
      take_reports(std::move(own), v);
    });
  });
}

void StoreLink::take_reports(ProbeReport report,
                             const std::vector<std::optional<std::string>>& values) {
  if (m_phase != Phase::k_joining || m_verdict_delivered || !m_preflight_topology) {
    return;
  }
  const std::string waited = seconds_text(2 * m_config.preflight_timeout_s + 5);
  for (size_t i = 0; i < m_pf_children.size(); ++i) {
    const int child = m_pf_children[i];
    const auto& v = values.at(i);
    if (!v) {
      const int below = m_pf_subtree.at(i) - 1;
      add_to_report(report, {node_text(child) + " did not finish its network preflight within " +
                             waited + " s" +
                             (below > 0 ? " (nor did the " + std::to_string(below) + " node" +
                                              (below == 1 ? "" : "s") +
                                              " below it in the tree, which report through it)"
                                        : std::string())});
      continue;
    }
    try {
      const ProbeReport theirs = decode_probe_report(*v);
      add_to_report(report, theirs.blocked, theirs.more);
    } catch (const RecordError& e) {
      add_to_report(report,
                    {node_text(child) + " reported a malformed network preflight: " + e.what()});
    }
  }
  preflight_gathered(std::move(report));
}

void StoreLink::send_report(ProbeReport report) {
  m_pf_pending = std::move(report);
  flush_report();
}

void StoreLink::flush_report() {
  if (!m_pf_pending || m_pf_held) {
    return;
  }
  const std::string text = encode_probe_report(*m_pf_pending);
  m_pf_pending.reset();
  StoreConnection& to = m_pf_to != nullptr ? *m_pf_to : m_store;
  to.set(keys::probed(m_node_rank), text, [this] { preflight_reported(); });
}

// Every node's paths are open: the round begins (node 0's rank 0 may bind
// MASTER_PORT now that the probe no longer holds it).
void StoreLink::preflight_passed() {
  if (m_phase != Phase::k_joining || m_verdict_delivered || !m_preflight_topology) {
    return;
  }
  if (m_probe != nullptr) {
    m_probe->release();
  }
  Topology topology = std::move(*m_preflight_topology);
  m_preflight_topology.reset();
  begin_round(topology, m_node_rank);
}

}  // namespace ddplaunch
