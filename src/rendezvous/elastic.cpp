// StoreLink's elastic membership (--nnodes MIN:MAX): the store host reads
// the join records of nodes that come while the job runs, regroups the job
// to admit them while restarts remain, and forms each next round of the
// nodes that remain and those that waited; a node that came late waits to be
// admitted. The round plans of fixed-size jobs take the same path, with the
// same nodes each round.
#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "posix/net.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"
#include "rendezvous/store_link.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;
// How long an admitted node waits for the round it was admitted at.
constexpr auto k_admitted_wait = Ms(5000);

std::string nnodes_text(const Config& c) {
  return std::to_string(c.nnodes_min) + ":" + std::to_string(c.nnodes);
}

}  // namespace

void StoreLink::watch_arrivals() {
  if (!m_arrivals) {
    const auto io = millis(m_config.heartbeat_timeout_s);
    m_arrivals = std::make_unique<AsyncClient>(m_config.master_addr, m_config.master_port, io, io,
                                               Clock::now(), m_config.rdzv_token);
    m_arrivals->set_failure_handler(
        [this](const std::string& why) { connection_lost(why, /*is_watch=*/false); });
  }
  if (m_next_arrival == m_self.arrival) {
    ++m_next_arrival;  // its own record, planned first
  }
  const int k = m_next_arrival;
  m_arrivals->get(keys::node(k), Ms(0),
                  [this, k](std::optional<std::string> text) { take_arrival(k, text); });
}

void StoreLink::take_arrival(int arrival, const std::optional<std::string>& text) {
  if (!text || m_phase == Phase::k_done) {
    return;
  }
  m_next_arrival = arrival + 1;
  watch_arrivals();
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
  log::info("{} joined the running job: it waits for the next round", describe_node(record));
  m_rpc->set(keys::plan(arrival), encode_answer(JoinAnswer{-1, "", true}), [] {});
  maybe_regroup();
}

// A node waits and there is room for it: with restarts remaining, the job
// meets again at once to admit it (as torchrun does; it uses no restart).
// Only once every node has started the round: a node still joining it, or
// the newcomer itself, ignores a regroup (watch_verdict).
void StoreLink::maybe_regroup() {
  if (m_phase != Phase::k_running || m_verdict_delivered || !m_planner || !m_planner->can_grow() ||
      m_restarts >= m_config.max_restarts || m_regrouped == m_round || m_all_started != m_round) {
    return;
  }
  m_regrouped = m_round;
  const auto& newcomer = m_planner->waiting().front();
  publish_stop(JobVerdict{0, describe_node(newcomer) + " joined the running job", std::nullopt,
                          m_node_rank, -1, true});
}

void StoreLink::wait_for_admission() {
  m_waiting = true;
  m_deferred.reset();  // a round this node is not part of
  log::info(
      "the job started without this node: it waits to be admitted at the job's next round "
      "(--nnodes {})",
      nnodes_text(m_config));
  // If this agent goes before it is admitted, the store says so.
  m_rpc->request(protocol::request::on_close(keys::left(m_self.arrival), "1"),
                 AsyncClient::Duration(0), [](const protocol::Reply&) {});
  // As torchrun's join timeout: a spare node waits --rdzv-timeout at most.
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(m_deadline - Clock::now()));
  m_wait->get(keys::admit(m_self.arrival), wait,
              [this](std::optional<std::string> text) { take_admission(text); });
}

void StoreLink::take_admission(const std::optional<std::string>& text) {
  if (m_phase != Phase::k_joining || !m_waiting) {
    return;
  }
  if (!text) {
    join_failed(k_exit_rendezvous,
                "not admitted to the running job within --rdzv-timeout " +
                    std::to_string(static_cast<long long>(m_config.rdzv_timeout_s)) +
                    " s (it runs with --nnodes " + nnodes_text(m_config) +
                    "'s MAX, or has no restarts left to admit a node at once); raise "
                    "--rdzv-timeout to keep a spare node waiting longer");
    return;
  }
  Admission admission;
  try {
    admission = decode_admission(*text);
  } catch (const RecordError& e) {
    join_failed(k_exit_rendezvous, std::string("node 0 published a malformed ") +
                                       keys::admit(m_self.arrival) + " record: " + e.what());
    return;
  }
  if (!admission.error.empty()) {
    join_failed(k_exit_rendezvous, admission.error);
    return;
  }
  log::info("admitted to the job: it joins with round {}", admission.round);
  m_waiting = false;
  m_round = admission.round;
  m_start = Clock::now();
  m_round_deadline = m_start + k_admitted_wait;
  watch_verdict();
  wait_for_round_plan();
}

// Every remaining node's workers of the last round have ended: the store
// host forms the next round of them and of the nodes that waited.
void StoreLink::form_next_round() {
  const int remain = m_planner->remaining(m_gone);
  if (remain < m_planner->min_nodes()) {
    publish_stop(JobVerdict{k_exit_node_lost,
                            "only " + std::to_string(remain) + " node" + (remain == 1 ? "" : "s") +
                                " remain, fewer than --nnodes " + nnodes_text(m_config) +
                                " allows: the job cannot go on",
                            std::nullopt, m_node_rank});
    return;
  }
  auto publish = [this](const std::set<int>& left) {
    const int port =
        m_config.worker_port.value_or(0) != 0 ? *m_config.worker_port : posix::pick_free_port();
    publish_round(m_planner->next_round(m_gone, left, m_config.master_addr, port));
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
  m_rpc->multi_get(left_keys, [this, waiting, publish](std::vector<std::optional<std::string>> v) {
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
// they wait for (requests on one connection are carried out in order).
void StoreLink::publish_round(const JobPlan& plan) {
  for (size_t arrival = 0; arrival < plan.node_rank_of_arrival.size(); ++arrival) {
    if (const int rank = plan.node_rank_of_arrival[arrival]; rank >= 0) {
      m_rpc->set(keys::round_rank(m_round, static_cast<int>(arrival)), encode_assignment(rank),
                 [] {});
    }
  }
  for (const int arrival : plan.admitted) {
    m_rpc->set(keys::admit(arrival), encode_admission(Admission{m_round, ""}), [] {});
  }
  if (plan.topology.nnodes() != m_nnodes || !plan.admitted.empty()) {
    log::info("round {} runs on {} node{} ({} left, {} joined)", m_round, plan.topology.nnodes(),
              plan.topology.nnodes() == 1 ? "" : "s", m_gone.size(), plan.admitted.size());
  }
  const int node_rank = plan.node_rank_of_arrival.at(static_cast<size_t>(m_self.arrival));
  m_rpc->set(keys::round_plan(m_round), encode_plan(PlanRecord{plan.topology, "", m_restarts}),
             [this, topology = plan.topology, node_rank] { start_job(topology, node_rank); });
}

void StoreLink::take_round_plan(const std::optional<std::string>& text) {
  if (m_phase != Phase::k_joining || m_verdict_delivered) {
    return;
  }
  const std::string key = keys::round_plan(m_round);
  if (!text) {
    join_failed(k_exit_node_lost, "node 0 did not start round " + std::to_string(m_round) +
                                      " in time (is it frozen or gone?)");
    return;
  }
  PlanRecord record;
  try {
    record = decode_plan(*text);
  } catch (const RecordError& e) {
    join_failed(k_exit_node_lost, "node 0 published a malformed " + key + " record: " + e.what());
    return;
  }
  if (!record.topology) {
    join_failed(k_exit_node_lost, record.error);
    return;
  }
  m_restarts = record.restarts;
  const std::string mine = keys::round_rank(m_round, m_self.arrival);
  m_rpc->get(mine, Ms(1),
             [this, mine, topology = std::move(*record.topology)](std::optional<std::string> rank) {
               if (!rank) {
                 join_failed(
                     k_exit_node_lost,
                     "node 0 left this node out of round " + std::to_string(m_round) +
                         ": it was found lost, or its workers ended too late for the restart");
                 return;
               }
               int node_rank = -1;
               try {
                 node_rank = decode_assignment(*rank);
               } catch (const RecordError& e) {
                 join_failed(k_exit_node_lost,
                             "node 0 published a malformed " + mine + " record: " + e.what());
                 return;
               }
               take_assignment(topology, node_rank, mine);
             });
}

// The job ends: the nodes still waiting to be admitted are told so.
void StoreLink::tell_waiting(std::function<void()> then) {
  const std::vector<int> waiting = m_planner ? m_planner->drop_waiting() : std::vector<int>{};
  if (waiting.empty()) {
    then();
    return;
  }
  for (size_t i = 0; i < waiting.size(); ++i) {
    const bool last = i + 1 == waiting.size();
    m_rpc->set(keys::admit(waiting[i]),
               encode_admission(Admission{
                   0,
                   "the job ended before this node could be admitted (a node that joins a "
                   "running elastic job waits for its next round, which starts at once only "
                   "while --max-restarts remain and fewer than MAX nodes run)"}),
               [then, last] {
                 if (last) {
                   then();
                 }
               });
  }
}

}  // namespace ddplaunch
