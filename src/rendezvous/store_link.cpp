// StoreLink: connections, I/O, and the joining phase. The run and finishing
// phases are in job_phase.cpp.
#include "rendezvous/store_link.hpp"

#include <algorithm>

#include "ddplaunch/error.hpp"
#include "log.hpp"
#include "posix/interfaces.hpp"
#include "posix/net.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/records.hpp"
#include "store/auth.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;
constexpr auto k_ack_wait = Ms(5000);  // how long node 0 keeps the store up for a failed rendezvous
constexpr auto k_watch_grace = Ms(1000);  // how long the watch may take to bring the verdict

// Every interface (as TCPStore), so that other hosts reach node 0 whatever its
// own name resolves to there (Debian maps it to 127.0.1.1); loopback for a
// loopback job; or what --store-bind says.
std::string store_bind_address(const Config& c) {
  if (!c.store_bind.empty()) {
    return c.store_bind;
  }
  return posix::is_loopback(c.master_addr) ? c.master_addr : "";
}

std::string seconds_text(double s) {
  return std::to_string(static_cast<long long>(s));
}

}  // namespace

StoreLink::StoreLink(const Config& config)
    : m_config(config), m_where(config.master_addr + ":" + std::to_string(config.master_port)) {}

StoreLink::~StoreLink() {
  // Connections first: the server then sees them close, not a reset.
  m_rpc.reset();
  m_watch.reset();
  m_wait.reset();
  m_arrivals.reset();
  m_server.reset();
}

std::vector<StoreLink::Watch> StoreLink::watches() const {
  std::vector<Watch> out;
  uint64_t index = 0;
  for (const auto* c : {m_rpc.get(), m_watch.get(), m_wait.get(), m_arrivals.get()}) {
    ++index;
    if (c != nullptr && c->fd() >= 0 && c->events() != 0) {
      out.push_back({c->fd(), c->events(), (index << 32) | static_cast<uint32_t>(c->attempts())});
    }
  }
  return out;
}

void StoreLink::on_ready(int fd, uint32_t events, TimePoint now) {
  for (auto* c : {m_rpc.get(), m_watch.get(), m_wait.get(), m_arrivals.get()}) {
    if (c != nullptr && c->fd() == fd) {
      c->on_ready(events, now);
      return;
    }
  }
}

std::optional<StoreLink::TimePoint> StoreLink::deadline() const {
  std::optional<TimePoint> first;
  auto consider = [&first](std::optional<TimePoint> t) {
    if (t && (!first || *t < *first)) {
      first = t;
    }
  };
  for (const auto* c : {m_rpc.get(), m_watch.get(), m_wait.get(), m_arrivals.get()}) {
    if (c != nullptr) {
      consider(c->deadline());
    }
  }
  if (m_phase == Phase::k_joining) {
    consider(m_next_progress);
  }
  if (m_lost_why) {
    consider(m_lost_deadline);
  }
  if (m_phase == Phase::k_finishing) {
    consider(m_finish_deadline);
  }
  if (m_phase == Phase::k_running) {
    consider(m_next_tick);
  }
  return first;
}

void StoreLink::on_time(TimePoint now) {
  for (auto* c : {m_rpc.get(), m_watch.get(), m_wait.get(), m_arrivals.get()}) {
    if (c != nullptr) {
      c->on_time(now);
    }
  }
  if (m_lost_why && now >= m_lost_deadline) {
    store_lost(*m_lost_why);
  }
  if (m_phase == Phase::k_finishing && m_finish_deadline && now >= *m_finish_deadline) {
    log::debug("node 0 did not acknowledge this node's results in time; leaving");
    finished(m_local);
  }
  if (m_phase == Phase::k_joining && now >= m_next_progress) {
    progress(now);
  }
  if (m_phase == Phase::k_running && now >= m_next_tick) {
    tick(now);
  }
}

void StoreLink::host_store() {
  const bool explicit_host = m_config.node_rank == 0;
  if (!explicit_host && (m_config.node_rank || !posix::is_local_address(m_config.master_addr))) {
    return;
  }
  try {
    StoreOptions options;
    options.token = m_config.rdzv_token;
    if (!options.token.empty()) {
      options.worker_token = auth::worker_token(options.token);  // the workers' (launch.cpp)
    }
    // Every agent holds three connections (watch, wait, rpc): a job of more
    // than about 1,300 nodes needs more than the default allows.
    options.max_clients = std::max(m_config.rdzv_max_clients, 3 * m_config.nnodes + 16);
    m_server = std::make_unique<StoreServer>(store_bind_address(m_config), m_config.master_port,
                                             std::move(options));
    log::debug("hosting the store on {}", m_where);
  } catch (const std::system_error& e) {
    if (explicit_host) {
      throw LaunchError(k_exit_rendezvous,
                        "node 0 cannot host the store: " + std::string(e.what()) +
                            "; is another job using --master-port " +
                            std::to_string(m_config.master_port) + "? choose a free port");
    }
    // Another agent on this host got there first: it is node 0.
  }
}

void StoreLink::join(const JoinRecord& self) {
  m_phase = Phase::k_joining;
  m_start = Clock::now();
  m_deadline = m_start + millis(m_config.rdzv_timeout_s);
  m_next_progress = m_start + k_progress_every;
  m_self = self;
  host_store();
  m_self.store_host = m_server != nullptr;
  log::debug("joining the job through the store at {}", m_where);
  const auto connect_for = std::chrono::ceil<Ms>(m_deadline - m_start);
  const auto io = millis(m_config.heartbeat_timeout_s);
  for (auto* c : {&m_rpc, &m_watch, &m_wait}) {
    *c = std::make_unique<AsyncClient>(m_config.master_addr, m_config.master_port, connect_for, io,
                                       m_start, m_config.rdzv_token);
    const bool is_watch = c == &m_watch;
    AsyncClient* client = c->get();
    (*c)->set_failure_handler([this, is_watch, client](const std::string& why) {
      // Refused at the handshake (a token, or not a ddplaunch store there):
      // a rendezvous failure, never a lost node.
      m_refused = m_refused || !client->handshaken();
      connection_lost(why, is_watch);
    });
  }
  if (m_rpc->state() == AsyncClient::State::k_failed) {
    store_lost(m_rpc->error());  // failed at once: the host does not resolve
    return;
  }
  watch_verdict();  // it can come at any phase, rendezvous included
  m_rpc->add(keys::k_arrivals, 1, [this](int64_t n) { joined_as(static_cast<int>(n - 1)); });
}

// The round's verdict, whenever it comes; one of an earlier round (answered
// after the next round began) is dropped.
void StoreLink::watch_verdict() {
  const int round = m_round;
  m_watch->get(keys::stop(round), Ms(0), [this, round](std::optional<std::string> text) {
    if (round != m_round || m_waiting) {
      return;  // an earlier round's, or one this node is not part of
    }
    try {
      JobVerdict verdict = decode_verdict(text.value_or(""));
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
  });
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
  if (verdict.success() || verdict.root_cause || verdict.lost >= 0) {
    m_deferred = verdict;  // delivered by start_job()
  } else {
    deliver(verdict);
  }
}

void StoreLink::joined_as(int arrival) {
  m_self.arrival = arrival;
  m_rpc->set(keys::node(arrival), encode_join(m_self), [this] {
    if (m_server) {
      // The store host is part of the job whenever it came: its own record
      // first, then the others' in arrival order.
      m_planner.emplace(m_self);
      m_planner->add(m_self);
      host_wait_for(0);
    } else {
      log::debug("joined as arrival {}: waiting for node 0's plan (its answer first)",
                 m_self.arrival);
      wait_for_answer();
    }
  });
}

// Node 0 reads the join records in arrival order, each as it arrives.
void StoreLink::host_wait_for(int k) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  if (k == m_self.arrival) {
    ++k;  // its own, added first
  }
  m_next_arrival = k;
  const auto now = Clock::now();
  if (m_planner->elastic() && m_planner->enough() && !m_last_call) {
    m_last_call = now + millis(m_config.rdzv_last_call_s);
    log::info("{} of {} to {} nodes joined: the job starts in {} s, or once {} have joined",
              m_planner->joined(), m_planner->min_nodes(), m_planner->max_nodes(),
              m_config.rdzv_last_call_s, m_planner->max_nodes());
  }
  if (m_last_call && now >= *m_last_call) {
    start_first_round();
    return;
  }
  if (now >= m_deadline) {
    host_fail("rendezvous timed out after " + seconds_text(m_config.rdzv_timeout_s) +
              " s: " + std::to_string(m_planner->joined()) + "/" +
              std::to_string(m_planner->min_nodes()) + " joined (missing: " + m_planner->missing() +
              "); start ddplaunch on the missing nodes with the same --master-addr/--master-port");
    return;
  }
  const auto until = m_last_call ? std::min(*m_last_call, m_deadline) : m_deadline;
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(until - now));
  m_wait->get(keys::node(k), wait, [this, k](std::optional<std::string> text) {
    if (!text) {
      host_wait_for(k);  // the deadline passed: the next call says so
      return;
    }
    JoinRecord record;
    try {
      record = decode_join(*text);
    } catch (const RecordError& e) {
      host_fail("the join record of arrival " + std::to_string(k) + " is malformed: " + e.what());
      return;
    }
    record.arrival = k;
    if (auto refusal = m_planner->add(record)) {
      if (refusal->whole_job) {
        host_fail(refusal->message);
        return;
      }
      refuse(k, refusal->message);
      host_wait_for(k + 1);
      return;
    }
    log::debug("{} joined ({}/{})", describe_node(record), m_planner->joined(), m_config.nnodes);
    if (!m_planner->complete()) {
      host_wait_for(k + 1);
      return;
    }
    m_next_arrival = k + 1;
    start_first_round();
  });
}

// That node alone is refused; the job goes on waiting for its own nodes.
void StoreLink::refuse(int arrival, const std::string& why) {
  log::warn("refused a node: {}", why);
  m_rpc->set(keys::plan(arrival), encode_answer(JoinAnswer{-1, why, false}), [] {});
}

void StoreLink::start_first_round() {
  const int worker_port =
      m_config.worker_port.value_or(0) != 0 ? *m_config.worker_port : posix::pick_free_port();
  publish_plan(m_planner->plan(m_config.master_addr, worker_port));
  // Whoever joins from now on is answered while the job runs: an elastic
  // job's newcomer waits for a round, any other is one node too many.
  watch_arrivals();
}

// Each node's answer (its rank) first, then the plan: requests on one
// connection are carried out in order, so a node that reads its answer
// finds the plan next. Each node reads a constant number of bytes, whatever
// the job's size.
void StoreLink::publish_plan(const JobPlan& plan) {
  for (size_t arrival = 0; arrival < plan.node_rank_of_arrival.size(); ++arrival) {
    const int rank = plan.node_rank_of_arrival[arrival];
    if (rank >= 0 && static_cast<int>(arrival) != m_self.arrival) {
      m_rpc->set(keys::plan(static_cast<int>(arrival)), encode_answer(JoinAnswer{rank, "", false}),
                 [] {});
    }
  }
  const auto self = static_cast<size_t>(m_self.arrival);
  if (self >= plan.node_rank_of_arrival.size() || plan.node_rank_of_arrival[self] < 0) {
    host_fail("internal: the plan leaves out the store host");  // the planner adds it first
    return;
  }
  const int node_rank = plan.node_rank_of_arrival[self];
  m_rpc->set(keys::k_plan, encode_plan(PlanRecord{plan.topology, ""}),
             [this, topology = plan.topology, node_rank] { start_job(topology, node_rank); });
}

// Node 0 publishes why rendezvous failed, and keeps the store up until every
// node that joined has read it (bounded).
void StoreLink::host_fail(const std::string& error) {
  m_rpc->set(keys::k_plan, encode_plan(PlanRecord{std::nullopt, error}), [this, error] {
    m_rpc->add(keys::k_arrivals, 0, [this, error](int64_t joined) {
      std::vector<std::string> acks;
      for (int a = 0; a < joined; ++a) {
        if (a != m_self.arrival) {
          m_rpc->set(keys::plan(a), encode_answer(JoinAnswer{-1, error, false}), [] {});
          acks.push_back(keys::ack(a));
        }
      }
      m_wait->wait(acks, k_ack_wait,
                   [this, error](bool) { join_failed(k_exit_rendezvous, error); });
    });
  });
}

// A node other than the store host waits for node 0's answer to it: its
// rank (then the plan), a refusal, or (a running elastic job) to wait.
void StoreLink::wait_for_answer() {
  if (m_phase != Phase::k_joining) {
    return;
  }
  // A little past our own deadline, so node 0's verdict (which names the
  // missing nodes) reaches us first.
  const auto plan_deadline = m_deadline + std::chrono::seconds(5);
  const auto now = Clock::now();
  if (now >= plan_deadline) {
    join_failed(k_exit_rendezvous, "rendezvous timed out after " +
                                       seconds_text(m_config.rdzv_timeout_s) +
                                       " s: node 0 never published the job's plan; check that "
                                       "every node was started");
    return;
  }
  const auto wait = std::max(Ms(1), std::chrono::ceil<Ms>(plan_deadline - now));
  m_wait->get(keys::plan(m_self.arrival), wait, [this](std::optional<std::string> text) {
    if (text) {
      take_answer(*text);
    } else {
      wait_for_answer();
    }
  });
}

void StoreLink::take_answer(const std::string& text) {
  m_rpc->set(keys::ack(m_self.arrival), "1", [] {});
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
    wait_for_admission();  // it joined after node 0 planned the first round
    return;
  }
  // The plan is written right after the answers, on the same connection.
  const auto wait = std::chrono::ceil<Ms>(millis(m_config.heartbeat_timeout_s));
  m_wait->get(keys::k_plan, wait, [this, rank = answer.node_rank](std::optional<std::string> plan) {
    take_plan(plan, rank);
  });
}

void StoreLink::take_plan(const std::optional<std::string>& text, int node_rank) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  PlanRecord record;
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
  take_assignment(std::move(*record.topology), node_rank, keys::plan(m_self.arrival));
}

// This node's rank, and its own entry: the plan holds only the node sizes.
void StoreLink::take_assignment(Topology topology, int node_rank, const std::string& key) {
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
    start_job(topology, node_rank);
  } catch (const std::exception& e) {  // RecordError, or std::out_of_range for a rank past the job
    join_failed(k_exit_rendezvous, "node 0 published a malformed plan (" + key + "): " + e.what());
  }
}

void StoreLink::join_failed(int exit_code, const std::string& message) {
  if (m_phase != Phase::k_joining) {
    return;
  }
  m_phase = Phase::k_done;
  m_listener->on_join_failed(exit_code, message);
}

void StoreLink::progress(TimePoint now) {
  m_next_progress = now + k_progress_every;
  const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - m_start).count();
  if (m_waiting) {
    log::info("waiting to be admitted: the job runs without this node ({} s)", waited);
  } else if (m_round > 0) {
    log::info("waiting for every node to end round {}'s workers ({} s)", m_round - 1, waited);
  } else if (m_rpc->state() == AsyncClient::State::k_connecting) {
    log::info("connecting to the store at {} (attempt {}, {} s)", m_where, m_rpc->attempts(),
              waited);
  } else if (m_planner && m_planner->enough()) {
    log::info("waiting for more nodes: {} of {} to {} joined ({} s)", m_planner->joined(),
              m_planner->min_nodes(), m_planner->max_nodes(), waited);
  } else if (m_planner) {
    log::info("waiting for nodes: {}/{} joined (missing: {}; {} s)", m_planner->joined(),
              m_planner->min_nodes(), m_planner->missing(), waited);
  } else if (m_rpc->idle()) {
    m_rpc->add(keys::k_arrivals, 0, [this, waited](int64_t joined) {
      log::info("waiting for nodes: {}/{} joined ({} s)", joined, m_config.nnodes, waited);
    });
  }
}

void StoreLink::connection_lost(const std::string& why, bool is_watch) {
  const bool watching = m_watch && m_watch->state() != AsyncClient::State::k_failed;
  if (!is_watch && watching && m_phase != Phase::k_finishing && !m_lost_why) {
    m_lost_why = why;
    m_lost_deadline = Clock::now() + k_watch_grace;
    return;
  }
  store_lost(m_lost_why.value_or(why));
}

void StoreLink::store_lost(std::string why) {
  m_lost_why.reset();
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
      if (why.find("version mismatch") != std::string::npos) {
        join_failed(k_exit_rendezvous, why);
      } else if (m_refused && !why.starts_with("cannot reach")) {
        join_failed(k_exit_rendezvous, "rendezvous failed: " + why);
      } else if (why.starts_with("cannot reach")) {
        join_failed(k_exit_rendezvous, why + " within --rdzv-timeout " +
                                           seconds_text(m_config.rdzv_timeout_s) +
                                           " s; is ddplaunch running on node 0 with the same "
                                           "--master-addr/--master-port?");
      } else {
        join_failed(k_exit_node_lost, "rendezvous failed: " + why);
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
