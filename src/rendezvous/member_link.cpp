#include "rendezvous/member_link.hpp"

#include <algorithm>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;
// How long an admitted node waits for the round it was admitted at.
constexpr auto k_admitted_wait = Ms(5000);

}  // namespace

void MemberLink::joined_as(int arrival) {
  log::debug("joined as arrival {}: waiting for node 0's plan (its answer first)", arrival);
  wait_for_answer();
}

void MemberLink::report_progress(long long waited) {
  if (!m_store.idle()) {
    return;
  }
  m_store.add(keys::k_arrivals, 0, [this, waited](int64_t joined) {
    log::info("waiting for nodes: {}/{} joined ({} s)", joined, m_config.nnodes, waited);
  });
}

// Node 0's answer to this node: its rank (then the plan), a refusal, or (a
// running elastic job) to wait.
void MemberLink::wait_for_answer() {
  if (m_phase != Phase::k_joining) {
    return;
  }
  // A little past our own deadline, so node 0's verdict (which names the
  // missing nodes) reaches us first.
  const auto plan_deadline = m_deadline + std::chrono::seconds(5);
  const auto t = now();
  if (t >= plan_deadline) {
    join_failed(k_exit_rendezvous, "rendezvous timed out after " +
                                       seconds_text(m_config.rdzv_timeout_s) +
                                       " s: node 0 never published the job's plan; check that "
                                       "every node was started");
    return;
  }
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(plan_deadline - t));
  m_store.get(keys::plan(m_self.arrival), wait, [this](std::optional<std::string> text) {
    if (text) {
      take_answer(*text);
    } else {
      wait_for_answer();
    }
  });
}

void MemberLink::take_answer(const std::string& text) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  m_join_step = JoinStep::k_answered;
  m_store.set(keys::ack(m_self.arrival), "1", [] {});
  JoinAnswer answer;
  try {
    answer = decode_answer(text);
  } catch (const RecordError& e) {
    join_failed(k_exit_rendezvous, std::string("node 0 published a malformed answer (") +
                                       keys::plan(m_self.arrival) + "): " + e.what());
    return;
  }
  if (!answer.error.empty()) {
    join_failed(k_exit_rendezvous, answer.error);
    return;
  }
  if (answer.wait) {
    wait_for_admission(answer.spare);  // it joined after node 0 planned the first round
    return;
  }
  // The plan is written right after the answers.
  const auto wait = std::chrono::ceil<Ms>(millis(m_config.heartbeat_timeout_s));
  m_store.get(keys::k_plan, wait, [this, rank = answer.node_rank](std::optional<std::string> plan) {
    take_plan(plan, rank);
  });
}

void MemberLink::take_plan(const std::optional<std::string>& text, int node_rank) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  TopologyRecord record;
  try {
    if (!text) {
      throw RecordError("node 0 answered this node but published no plan in time");
    }
    record = decode_plan(*text);
  } catch (const RecordError& e) {
    join_failed(k_exit_rendezvous, std::string("node 0 published a malformed plan: ") + e.what());
    return;
  }
  if (!record.topology) {
    join_failed(k_exit_rendezvous, record.error);
    return;
  }
  m_plan_preflight = record.preflight;
  take_assignment(std::move(*record.topology), node_rank, keys::plan(m_self.arrival));
}

// This node's rank, and its own entry: the plan holds only the node sizes.
void MemberLink::take_assignment(Topology topology, int node_rank, const std::string& key) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  // The rank came from the network: it is checked against the plan before
  // anything is indexed with it.
  try {
    if (node_rank < 0 || node_rank >= topology.nnodes()) {
      throw RecordError("node rank " + std::to_string(node_rank) + " is outside the job's " +
                        std::to_string(topology.nnodes()) + " nodes");
    }
    if (!topology.complete()) {
      NodeEntry self = entry_from_sizes(topology.sizes, node_rank);
      if (self.nproc != m_self.nproc) {
        throw RecordError("it gives node " + std::to_string(node_rank) + " " +
                          std::to_string(self.nproc) + " workers, this node starts " +
                          std::to_string(m_self.nproc));
      }
      self.host = m_self.host;
      self.addr = m_self.addr;
      topology.nodes = {std::move(self)};
    } else if (topology.find(node_rank) == nullptr) {
      throw RecordError("node " + std::to_string(node_rank) + " is not in it");
    }
  } catch (const std::exception& e) {  // RecordError, or std::out_of_range for a rank past the job
    join_failed(k_exit_rendezvous, "node 0 published a malformed plan (" + key + "): " + e.what());
    return;
  }
  start_job(topology, node_rank, std::exchange(m_plan_preflight, false));
}

// Node 0 says go once every node's report is in and no path is blocked;
// else its verdict (watch_verdict) names them.
void MemberLink::preflight_reported() {
  // Node 0 began before this node (it published the plan) and decides by
  // its own deadline at the latest: a few seconds more here, so that its
  // verdict, not this node's impatience, ends a preflight that a node
  // deep in the tree never finished.
  const auto wait = std::max(
      Ms(1), std::chrono::ceil<Ms>(m_preflight_deadline + std::chrono::seconds(5) - now()));
  m_store.get(keys::k_preflight, wait, [this](std::optional<std::string> go) {
    if (m_phase != Phase::k_joining || m_verdict_delivered) {
      return;
    }
    if (!go) {
      join_failed(k_exit_node_lost,
                  "node 0 did not end the network preflight in time (is it frozen or gone?)");
      return;
    }
    preflight_passed();
  });
}

void MemberLink::round_starting(const Topology&, TimePoint) {
  if (m_last_word != std::pair(m_round.round, m_node_rank)) {
    leave_last_word();  // a survivor's was left when the round began (next_round)
  }
}

void MemberLink::round_starting_soon() {
  if (m_last_word != std::pair(m_round.round, m_node_rank)) {
    leave_last_word();  // left already when the verdict came (verdict_arrived)
  }
}

// The round's stop key is taken now, so a last word on it would say nothing:
// it moves to the next round's at once. An agent killed while its workers
// stop for a restart (up to --term-timeout) is then heard within
// milliseconds, not after the heartbeat timeout. If the job ends instead,
// nobody reads that key.
void MemberLink::verdict_arrived() {
  leave_last_word(m_round.round + 1);
}

// If this agent's connection closes while the round runs (the agent killed,
// its host rebooted), the store itself publishes that this node was lost:
// every node hears it at once, not after the heartbeat timeout. A verdict
// already there (this node's own end) makes it a no-op.
void MemberLink::leave_last_word(std::optional<int> round) {
  m_last_word = {round.value_or(m_round.round), m_node_rank};
  const std::string who = "node " + std::to_string(m_node_rank) + " (" + m_self.host + ")";
  JobVerdict lost{k_exit_node_lost,
                  who +
                      " was lost: its agent's connection to the store closed (the agent was "
                      "killed, or its host rebooted)",
                  std::nullopt, m_node_rank, m_node_rank};
  m_store.on_close(keys::stop(m_last_word.first), encode_verdict(lost));
}

void MemberLink::results_sent() {
  finished(m_local);
}

void MemberLink::round_ended(int, const std::set<int>&) {
  wait_for_round_plan();
}

void MemberLink::wait_for_admission(bool spare) {
  m_waiting = true;
  m_spare = spare;
  m_deferred.reset();  // a round this node is not part of
  if (spare) {
    log::info(
        "the job runs at --nnodes {}'s MAX: this node waits to be admitted as a hot spare, "
        "taking the place of a node the job loses",
        m_config.nnodes_range());
  } else {
    log::info(
        "the job started without this node: it waits to be admitted at the job's next round "
        "(--nnodes {})",
        m_config.nnodes_range());
  }
  // If this agent goes before it is admitted, the store says so.
  m_store.on_close(keys::left(m_self.arrival), "1");
  // As torchrun's join timeout: a spare node waits --rdzv-timeout at most.
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(m_deadline - now()));
  m_store.get(keys::admit(m_self.arrival), wait,
              [this](std::optional<std::string> text) { take_admission(text); });
}

void MemberLink::take_admission(const std::optional<std::string>& text) {
  if (m_phase != Phase::k_joining || !m_waiting) {
    return;
  }
  if (!text) {
    join_failed(k_exit_rendezvous,
                "not admitted to the running job within --rdzv-timeout " +
                    seconds_text(m_config.rdzv_timeout_s) + " s (it runs with --nnodes " +
                    m_config.nnodes_range() +
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
    if (m_spare && admission.job_exit >= 0) {
      // A hot spare the job never needed: the job's outcome is its own.
      m_listener->on_not_needed(
          admission.job_exit, "the job ended with exit code " + std::to_string(admission.job_exit) +
                                  " without needing this node (it waited as a hot spare)");
      return;
    }
    join_failed(k_exit_rendezvous, admission.error);
    return;
  }
  log::info("admitted to the job: it joins with round {}", admission.round);
  m_waiting = false;
  m_round.round = admission.round;  // the restarts come with the round's plan
  m_start = now();
  m_round_deadline = m_start + k_admitted_wait;
  watch_verdict();
  wait_for_round_plan();
}

void MemberLink::wait_for_round_plan() {
  const auto wait =
      std::max(Ms(1), std::chrono::ceil<Ms>(m_round_deadline - now()) + std::chrono::seconds(5));
  m_store.get(keys::round_plan(m_round.round), wait,
              [this](std::optional<std::string> text) { take_round_plan(text); });
}

void MemberLink::take_round_plan(const std::optional<std::string>& text) {
  if (m_phase != Phase::k_joining || m_verdict_delivered) {
    return;
  }
  const std::string key = keys::round_plan(m_round.round);
  if (!text) {
    join_failed(k_exit_node_lost, "node 0 did not start round " + std::to_string(m_round.round) +
                                      " in time (is it frozen or gone?)");
    return;
  }
  TopologyRecord record;
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
  m_round.restarts = record.restarts;
  m_round.no_progress = record.no_progress;
  m_round.replaced = record.replaced;
  if (record.stop_cleared && m_deferred) {
    // The last word of a node this round leaves out, which node 0 cleared.
    m_deferred.reset();
    watch_verdict();
  }
  // Its rank was written before the plan: already there.
  m_store.get(keys::round_rank(m_round.round, m_self.arrival), Ms(1),
              [this, topology = std::move(*record.topology)](std::optional<std::string> rank) {
                take_round_rank(rank, topology);
              });
}

void MemberLink::take_round_rank(const std::optional<std::string>& text, const Topology& topology) {
  const std::string key = keys::round_rank(m_round.round, m_self.arrival);
  if (!text) {
    join_failed(k_exit_node_lost,
                "node 0 left this node out of round " + std::to_string(m_round.round) +
                    ": it was found lost, or its workers ended too late for the restart");
    return;
  }
  int node_rank = -1;
  try {
    node_rank = decode_assignment(*text);
  } catch (const RecordError& e) {
    join_failed(k_exit_node_lost, "node 0 published a malformed " + key + " record: " + e.what());
    return;
  }
  take_assignment(topology, node_rank, key);
}

}  // namespace ddplaunch
