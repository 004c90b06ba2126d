// HostLink's joining: node 0 reads, checks and answers every join record,
// publishes the plan, and while the job runs answers the agents that come
// late (elastic membership: --nnodes MIN:MAX).
#include "rendezvous/host_link.hpp"

#include <algorithm>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;
constexpr auto k_ack_wait = Ms(5000);  // how long node 0 keeps the store up for a failed rendezvous
// How long node 0, having failed its own health check, waits for the other
// nodes to join and hear it.
constexpr auto k_refused_host_wait = Ms(5000);

}  // namespace

HostLink::HostLink(const Config& config, StoreAddress address, StoreConnection& connection,
                   const Clock& clock, PortPicker pick_port, RefusedHosts refused)
    : StoreLink(config, std::move(address), connection, clock),
      m_pick_port(std::move(pick_port)),
      m_refused(std::move(refused)) {}

// The store host is part of the job whenever it came: its own record first,
// then the others' in arrival order. Its own record is refused only when it
// failed its health check: without it there is no job, elastic or not. The
// nodes started with it (a launching command starts them all at once) are
// told so as they join, for a few seconds, rather than finding the store
// gone.
void HostLink::joined_as(int) {
  m_planner.emplace(m_self);
  if (auto refusal = m_planner->add(m_self)) {
    const int last = std::max(m_config.nnodes - 1, m_self.arrival);
    const auto wait = std::min<Ms>(k_refused_host_wait, millis(m_config.rdzv_timeout_s));
    m_store.get(keys::node(last), wait,
                [this, why = refusal->message](const std::optional<std::string>&) { fail(why); });
    return;
  }
  wait_for(0);
}

int HostLink::worker_port() {
  return m_config.worker_port.value_or(0) != 0 ? *m_config.worker_port : m_pick_port();
}

// Reads the join records in arrival order, each as it arrives.
void HostLink::wait_for(int k) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  if (k == m_self.arrival) {
    ++k;  // its own, added first
  }
  m_next_arrival = k;
  const auto t = now();
  if (m_planner->elastic() && m_planner->enough() && !m_last_call) {
    m_last_call = t + millis(m_config.rdzv_last_call_s);
    log::info("{} of {} to {} nodes joined: the job starts in {} s, or once {} have joined",
              m_planner->joined(), m_planner->min_nodes(), m_planner->max_nodes(),
              m_config.rdzv_last_call_s, m_planner->max_nodes());
  }
  if (m_last_call && t >= *m_last_call) {
    start_first_round();
    return;
  }
  if (t >= m_deadline) {
    // The store may have refused the very nodes that are missing.
    std::string refused;
    for (const auto& host : m_refused ? m_refused() : std::vector<std::string>{}) {
      refused += (refused.empty() ? "" : ", ") + host;
    }
    fail("rendezvous timed out after " + seconds_text(m_config.rdzv_timeout_s) +
         " s: " + std::to_string(m_planner->joined()) + "/" +
         std::to_string(m_planner->min_nodes()) + " joined (missing: " + m_planner->missing() +
         (refused.empty()
              ? "); start ddplaunch on the missing nodes with the same --master-addr/--master-port"
              : "); the store refused " + refused +
                    ": give every node the job's token (the same --rdzv-token-file, "
                    "DDPLAUNCH_RDZV_TOKEN, or `ddplaunch token init` on a shared home)"));
    return;
  }
  const auto until = m_last_call ? std::min(*m_last_call, m_deadline) : m_deadline;
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(until - t));
  m_store.get(keys::node(k), wait,
              [this, k](std::optional<std::string> text) { take_record(k, text); });
}

void HostLink::take_record(int k, const std::optional<std::string>& text) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  if (!text) {
    wait_for(k);  // the deadline passed: the next call says so
    return;
  }
  if (*text == k_vacant_arrival) {
    wait_for(k + 1);
    return;
  }
  JoinRecord record;
  try {
    record = decode_join(*text);
  } catch (const RecordError& e) {
    fail("the join record of arrival " + std::to_string(k) + " is malformed: " + e.what());
    return;
  }
  record.arrival = k;
  if (auto refusal = m_planner->add(record)) {
    if (refusal->whole_job) {
      fail(refusal->message);
      return;
    }
    refuse(k, refusal->message);
    wait_for(k + 1);
    return;
  }
  log::debug("{} joined ({}/{})", describe_node(record), m_planner->joined(), m_config.nnodes);
  if (!m_planner->complete()) {
    wait_for(k + 1);
    return;
  }
  m_next_arrival = k + 1;
  start_first_round();
}

// That node alone is refused; the job goes on waiting for its own nodes.
void HostLink::refuse(int arrival, const std::string& why) {
  log::warn("refused a node: {}", why);
  m_store.set(keys::plan(arrival), encode_answer(JoinAnswer{-1, why, false}), [] {});
}

void HostLink::start_first_round() {
  publish_plan(m_planner->plan(m_address.host, worker_port()));
  // Whoever joins from now on is answered while the job runs: an elastic
  // job's newcomer waits for a round, any other is one node too many.
  watch_arrivals();
}

// Each node's answer (its rank) first, then the plan: the store carries out
// a connection's writes in order, so a node that reads its answer finds the
// plan next. Each node reads a constant number of bytes, whatever the job's
// size.
void HostLink::publish_plan(RoundAssignment plan) {
  for (size_t arrival = 0; arrival < plan.node_rank_of_arrival.size(); ++arrival) {
    const int rank = plan.node_rank_of_arrival[arrival];
    if (rank >= 0 && static_cast<int>(arrival) != m_self.arrival) {
      m_store.set(keys::plan(static_cast<int>(arrival)), encode_answer(JoinAnswer{rank, "", false}),
                  [] {});
    }
  }
  const auto self = static_cast<size_t>(m_self.arrival);
  if (self >= plan.node_rank_of_arrival.size() || plan.node_rank_of_arrival[self] < 0) {
    fail("internal: the plan leaves out the store host");  // the planner adds it first
    return;
  }
  const int node_rank = plan.node_rank_of_arrival[self];
  const bool preflight = m_config.preflight && m_probe != nullptr && plan.topology.nnodes() > 1;
  if (preflight) {
    publish_probe_endpoints(plan.topology);
  }
  // Lent to the record and taken back: a plan of 16,384 nodes is not copied.
  TopologyRecord record{std::move(plan.topology), ""};
  record.preflight = preflight;
  const std::string text = encode_plan(record);
  m_store.set(keys::k_plan, text,
              [this, topology = std::move(*record.topology), node_rank, preflight] {
                m_preflight_started = now();
                start_job(topology, node_rank, preflight);
              });
}

// Before the plan: every node's probe listener, by node rank, and node 0's
// MASTER_PORT, held open until the preflight ends (nobody listens there
// before rank 0 starts).
void HostLink::publish_probe_endpoints(const Topology& topology) {
  const bool held = m_probe->hold_port(topology.master_port);
  if (!held) {
    log::warn("network preflight: MASTER_PORT {} cannot be bound here; it is not probed",
              topology.master_port);
  }
  for (int n = 0; n < topology.nnodes(); ++n) {
    const JoinRecord& r = m_planner->member(n);
    // Node 0 is dialled as MASTER_ADDR, as its rank 0's store will be (its
    // own advertised address may be on a NIC its peers do not reach).
    ProbeEndpoint e{r.host, n == 0 ? topology.master_addr : r.addr, r.probe_port,
                    n == 0 && held ? topology.master_port : 0};
    m_store.set(keys::probe(n), encode_probe_endpoint(e), [] {});
  }
}

// Every node's report, until the preflight's deadline: go when no path is
// blocked, else the job ends on every node with the blocked paths (exit 3).
// Every node's report is in node 0's (through the tree, its children's
// for their subtrees), or its time to gather is up.
void HostLink::preflight_gathered(ProbeReport report) {
  if (m_phase != Phase::k_joining || m_verdict_delivered) {
    return;
  }
  if (report.blocked.empty() && report.more == 0) {
    log::debug("network preflight: every path is open ({} nodes, {} ms)", m_nnodes,
               std::chrono::duration_cast<Ms>(now() - m_preflight_started).count());
    m_store.set(keys::k_preflight, "ok", [this] { preflight_passed(); });
    return;
  }
  if (report.blocked.empty()) {  // a count alone (a malformed report's)
    report.blocked.push_back(std::to_string(report.more) + " blocked paths");
    report.more = 0;
  }
  const long long others = static_cast<long long>(report.blocked.size()) - 1 + report.more;
  std::string message = "network preflight: " + report.blocked.front();
  if (others > 0) {
    message += " (and " + std::to_string(others) + " more path" + (others == 1 ? "" : "s") +
               ": each node's log names its own)";
  }
  message +=
      "; open the path (a firewall, a security group, the interface gloo and NCCL use: "
      "GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME), or start the job with --no-preflight";
  publish_stop(JobVerdict{k_exit_rendezvous, message, std::nullopt, m_node_rank});
}

// Node 0 publishes why rendezvous failed, and keeps the store up until every
// node that joined has read it (bounded).
void HostLink::fail(const std::string& error) {
  m_store.set(keys::k_plan, encode_plan(TopologyRecord{std::nullopt, error}), [this, error] {
    m_store.add(keys::k_arrivals, 0, [this, error](int64_t joined) {
      std::vector<std::string> acks;
      for (int a = 0; a < joined; ++a) {
        if (a != m_self.arrival) {
          m_store.set(keys::plan(a), encode_answer(JoinAnswer{-1, error, false}), [] {});
          acks.push_back(keys::ack(a));
        }
      }
      m_store.wait(acks, k_ack_wait,
                   [this, error](bool) { join_failed(k_exit_rendezvous, error); });
    });
  });
}

void HostLink::report_progress(long long waited) {
  if (!m_planner) {
    return;
  }
  if (m_preflight_topology) {
    if (m_verdict_delivered) {
      return;  // it ended
    }
    // Every node has joined: what is awaited is their preflight reports
    // (past --tree-fanout + 1 nodes, node 0's children's, each for its
    // subtree).
    std::vector<std::string> reports;
    for (const int n : m_pf_children) {
      reports.push_back(keys::probed(n));
    }
    m_store.multi_get(reports, [this, waited](std::vector<std::optional<std::string>> values) {
      std::vector<std::string> missing;
      if (!m_pf_probed) {
        missing.push_back(node_text(m_node_rank));  // its own probes still run
      }
      for (size_t i = 0; i < values.size() && i < m_pf_children.size(); ++i) {
        if (!values[i]) {
          missing.push_back(node_text(m_pf_children[i]));
        }
      }
      std::string named;
      for (size_t i = 0; i < missing.size() && i < 4; ++i) {
        named += (i == 0 ? "" : ", ") + missing[i];
      }
      if (missing.size() > 4) {
        named += " and " + std::to_string(missing.size() - 4) + " more";
      }
      const size_t awaited = m_pf_children.size() + 1;  // node 0's own too
      const bool tree = static_cast<int>(awaited) < m_nnodes;
      log::info("network preflight: waiting for the {}: {} of {} in{} ({} s)",
                tree ? "reports of node 0 and its children in the tree, each for its subtree"
                     : "nodes' reports",
                awaited - missing.size(), awaited,
                missing.empty() ? "" : " (missing: " + named + ")", waited);
    });
    return;
  }
  if (m_planner->enough()) {
    log::info("waiting for more nodes: {} of {} to {} joined ({} s)", m_planner->joined(),
              m_planner->min_nodes(), m_planner->max_nodes(), waited);
  } else {
    log::info("waiting for nodes: {}/{} joined (missing: {}; {} s)", m_planner->joined(),
              m_planner->min_nodes(), m_planner->missing(), waited);
  }
}

// The next node to join the running job: one GET parked on its record.
void HostLink::watch_arrivals() {
  if (m_watching_arrivals) {
    return;
  }
  if (m_next_arrival == m_self.arrival) {
    ++m_next_arrival;  // its own record, planned first
  }
  m_watching_arrivals = true;
  const int k = m_next_arrival;
  m_store.get(keys::node(k), Ms(0), [this, k](std::optional<std::string> text) {
    m_watching_arrivals = false;
    take_arrival(k, text);
  });
}

void HostLink::take_arrival(int arrival, const std::optional<std::string>& text) {
  if (!text || m_phase == Phase::k_done) {
    return;
  }
  m_next_arrival = arrival + 1;
  watch_arrivals();
  if (*text == k_vacant_arrival) {
    return;
  }
  JoinRecord record;
  std::optional<std::string> error;
  try {
    record = decode_join(*text);
    record.arrival = arrival;
    if (auto refusal = m_planner->add(record)) {
      error = refusal->message;
    }
  } catch (const RecordError& e) {
    error = "the join record of arrival " + std::to_string(arrival) + " is malformed: " + e.what();
  }
  if (error) {
    refuse(arrival, *error);
    return;
  }
  // At MAX (members + those already waiting), it is a hot spare.
  const bool spare =
      m_planner->members() + static_cast<int>(m_planner->waiting().size()) > m_planner->max_nodes();
  log::info("{} joined the running job: it waits {}", describe_node(record),
            spare ? "as a spare, for a lost node's place" : "for the next round");
  m_store.set(keys::plan(arrival), encode_answer(JoinAnswer{-1, "", true, spare}), [] {});
  maybe_regroup();
}

// A node waits and there is room for it: with restarts remaining, the job
// meets again at once to admit it (as torchrun does; it uses no restart).
// Only once every node has started the round: a node still joining it, or
// the newcomer itself, ignores a regroup (watch_verdict).
void HostLink::maybe_regroup() {
  if (m_phase != Phase::k_running || m_verdict_delivered || !m_planner || !m_planner->can_grow() ||
      m_round.restarts >= m_config.max_restarts || m_regrouped == m_round.round ||
      m_all_started != m_round.round) {
    return;
  }
  m_regrouped = m_round.round;
  const auto& newcomer = m_planner->waiting().front();
  publish_stop(JobVerdict{0, describe_node(newcomer) + " joined the running job", std::nullopt,
                          m_node_rank, -1, true});
}

}  // namespace ddplaunch
