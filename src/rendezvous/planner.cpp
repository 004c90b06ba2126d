#include "rendezvous/planner.hpp"

#include <algorithm>
#include <deque>
#include <set>

namespace ddplaunch {

namespace {

std::string ordinal(int n) {
  const char* suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    suffix = n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  }
  return std::to_string(n) + suffix;
}

// A command line as messages show it: at most 120 characters.
// The command as a shell would read it back: a word with blanks, quotes or
// nothing in it is shown in double quotes.
std::string shown(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& word : argv) {
    if (!text.empty()) {
      text += ' ';
    }
    const bool plain = !word.empty() && word.find_first_of(" \t\n\"'\\$`") == std::string::npos;
    if (plain) {
      text += word;
      continue;
    }
    text += '"';
    for (const char c : word) {
      if (c == '"' || c == '\\' || c == '$' || c == '`') {
        text += '\\';
      }
      text += c;
    }
    text += '"';
  }
  return text.size() <= 120 ? text : text.substr(0, 117) + "...";
}

}  // namespace

std::string describe_node(const JoinRecord& r) {
  std::string who = r.node_rank >= 0 ? "node " + std::to_string(r.node_rank)
                                     : "the node that joined " + ordinal(r.arrival + 1);
  return who + " (" + r.host + ", " + r.addr + ")";
}

bool RendezvousPlanner::elastic() const {
  return m_expected.nnodes_min > 0 && m_expected.nnodes_min <= m_expected.nnodes &&
         m_expected.nnodes > 1;
}

int RendezvousPlanner::min_nodes() const {
  return elastic() ? m_expected.nnodes_min : m_expected.nnodes;
}

namespace {

std::string nnodes_text(const JoinRecord& r) {
  const bool elastic = r.nnodes_min > 0 && r.nnodes_min <= r.nnodes && r.nnodes > 1;
  return elastic ? std::to_string(r.nnodes_min) + ":" + std::to_string(r.nnodes)
                 : std::to_string(r.nnodes);
}

}  // namespace

std::optional<Refusal> RendezvousPlanner::check(const JoinRecord& r) const {
  auto job = [](std::string message) { return Refusal{std::move(message), true}; };
  if (r.version != m_expected.version) {
    return job(describe_node(r) + " speaks rendezvous version " + std::to_string(r.version) +
               ", node 0 version " + std::to_string(m_expected.version) +
               "; run the same ddplaunch on every node");
  }
  if (r.argv != m_expected.argv) {
    // Another program on the same store port: a stranger (an unrelated job
    // that picked the same port), refused alone; this job goes on waiting.
    return Refusal{describe_node(r) + " runs '" + shown(r.argv) + "' but node 0 runs '" +
                       shown(m_expected.argv) +
                       "'; start the same program with the same arguments on every node, and "
                       "give unrelated jobs their own --master-port",
                   false};
  }
  if (r.run_id != m_expected.run_id) {
    return job(describe_node(r) + " has --rdzv-id " + r.run_id + " but node 0 has " +
               m_expected.run_id + "; give every node the same job id");
  }
  if (nnodes_text(r) != nnodes_text(m_expected)) {
    return job(describe_node(r) + " has --nnodes " + nnodes_text(r) + " but node 0 has --nnodes " +
               nnodes_text(m_expected) + "; give every node the same --nnodes");
  }
  if (r.max_restarts != m_expected.max_restarts) {
    return job(describe_node(r) + " has --max-restarts " + std::to_string(r.max_restarts) +
               " but node 0 has --max-restarts " + std::to_string(m_expected.max_restarts) +
               "; give every node the same --max-restarts");
  }
  if (r.restart_min_progress != m_expected.restart_min_progress ||
      r.max_no_progress_restarts != m_expected.max_no_progress_restarts) {
    return job(describe_node(r) + " has --restart-min-progress " +
               std::to_string(r.restart_min_progress) + " --max-no-progress-restarts " +
               std::to_string(r.max_no_progress_restarts) + " but node 0 has " +
               std::to_string(m_expected.restart_min_progress) + " and " +
               std::to_string(m_expected.max_no_progress_restarts) +
               "; give every node the same restart options");
  }
  if (!r.health.empty()) {
    // Checked against the job's own shape first: a node of another job that
    // failed its check is still a stranger.
    return Refusal{describe_node(r) + " failed its health check: " + r.health,
                   !elastic() || r.store_host};
  }
  if (r.node_rank >= r.nnodes || r.node_rank < -1) {
    return job(describe_node(r) + " claims node rank " + std::to_string(r.node_rank) +
               ", out of range for --nnodes " + std::to_string(r.nnodes));
  }
  return std::nullopt;
}

std::optional<Refusal> RendezvousPlanner::add(const JoinRecord& r) {
  if (auto refusal = check(r)) {
    if (m_planned) {
      refusal->whole_job = false;  // the job runs: only the newcomer is told
    }
    return refusal;
  }
  const auto one_too_many = [&] {
    return Refusal{"more agents joined than --nnodes " + nnodes_text(m_expected) + ": " +
                       describe_node(r) + " is not part of the job (is it started twice?)",
                   false};
  };
  if (m_planned) {
    if (!elastic()) {
      return one_too_many();
    }
    m_waiting.push_back(r);  // the next round may take it
    return std::nullopt;
  }
  if (const auto it = m_claimed.find(r.node_rank); r.node_rank >= 0 && it != m_claimed.end()) {
    return Refusal{"node rank " + std::to_string(r.node_rank) + " is claimed twice: by " +
                       describe_node(m_joined[it->second]) + " and by " + describe_node(r) +
                       "; give each node its own --node-rank, or use auto",
                   true};
  }
  if (complete()) {
    return one_too_many();
  }
  if (r.node_rank >= 0) {
    m_claimed.emplace(r.node_rank, m_joined.size());
  }
  m_joined.push_back(r);
  return std::nullopt;
}

std::string RendezvousPlanner::missing() const {
  std::set<int> claimed;
  bool any_automatic = false;
  for (const auto& r : m_joined) {
    any_automatic = any_automatic || r.node_rank < 0;
    claimed.insert(r.node_rank);
  }
  const int count = min_nodes() - joined();
  if (any_automatic || elastic()) {
    return std::to_string(count) + (count == 1 ? " node" : " nodes");
  }
  std::string names;
  for (int n = 0; n < m_expected.nnodes; ++n) {
    if (!claimed.contains(n)) {
      names += (names.empty() ? "node " : ", node ") + std::to_string(n);
    }
  }
  return names;
}

RoundAssignment RendezvousPlanner::plan(const std::string& worker_addr, int worker_port) {
  std::vector<JoinRecord> records = m_joined;
  std::set<int> taken;
  for (const auto& r : records) {
    if (r.node_rank >= 0) {
      taken.insert(r.node_rank);
    }
  }
  for (auto& r : records) {
    if (r.store_host && r.node_rank < 0 && !taken.contains(0)) {
      r.node_rank = 0;
      taken.insert(0);
    }
  }
  int next_free = 0;
  for (auto& r : records) {
    if (r.node_rank < 0) {
      while (taken.contains(next_free)) {
        ++next_free;
      }
      r.node_rank = next_free;
      taken.insert(next_free);
    }
  }
  std::stable_sort(records.begin(), records.end(), [](const JoinRecord& a, const JoinRecord& b) {
    return a.node_rank < b.node_rank;
  });
  m_planned = true;
  return plan_of(std::move(records), worker_addr, worker_port);
}

int RendezvousPlanner::remaining(const std::set<int>& gone) const {
  int count = 0;
  for (int n = 0; n < members(); ++n) {
    count += gone.contains(n) ? 0 : 1;
  }
  return count;
}

RoundAssignment RendezvousPlanner::next_round(const std::set<int>& gone, const std::set<int>& left,
                                              const std::string& worker_addr, int worker_port) {
  std::deque<JoinRecord> spares;
  for (auto& r : m_waiting) {
    if (!left.contains(r.arrival)) {
      spares.push_back(std::move(r));
    }
  }
  std::vector<JoinRecord> next;
  std::vector<int> admitted;
  std::vector<NodeReplacement> replaced;
  for (int n = 0; n < members(); ++n) {
    const JoinRecord& member = m_members[static_cast<size_t>(n)];
    if (!gone.contains(n)) {
      next.push_back(member);
    } else if (!spares.empty()) {
      replaced.push_back(
          NodeReplacement{static_cast<int>(next.size()), member.host, spares.front().host});
      admitted.push_back(spares.front().arrival);
      next.push_back(std::move(spares.front()));
      spares.pop_front();
    }
  }
  while (!spares.empty() && static_cast<int>(next.size()) < max_nodes()) {
    admitted.push_back(spares.front().arrival);
    next.push_back(std::move(spares.front()));
    spares.pop_front();
  }
  m_waiting.assign(std::make_move_iterator(spares.begin()), std::make_move_iterator(spares.end()));
  RoundAssignment plan = plan_of(std::move(next), worker_addr, worker_port);
  plan.admitted = std::move(admitted);
  plan.replaced = std::move(replaced);
  return plan;
}

std::vector<int> RendezvousPlanner::drop_waiting() {
  std::vector<int> arrivals;
  for (const auto& r : m_waiting) {
    arrivals.push_back(r.arrival);
  }
  m_waiting.clear();
  return arrivals;
}

// `members` in node rank order; their ranks become 0, 1, 2, ...
RoundAssignment RendezvousPlanner::plan_of(std::vector<JoinRecord> members,
                                           const std::string& worker_addr, int worker_port) {
  RoundAssignment plan;
  Topology& t = plan.topology;
  t.master_addr = worker_addr;
  t.master_port = worker_port;
  t.job_id = m_expected.job_id;
  t.tree_fanout = m_expected.tree_fanout;
  int rank = 0;
  for (auto& r : members) {
    r.node_rank = rank++;
    if (r.arrival >= 0) {
      if (static_cast<size_t>(r.arrival) >= plan.node_rank_of_arrival.size()) {
        plan.node_rank_of_arrival.resize(static_cast<size_t>(r.arrival) + 1, -1);
      }
      plan.node_rank_of_arrival[static_cast<size_t>(r.arrival)] = r.node_rank;
    }
    NodeEntry n;
    n.node_rank = r.node_rank;
    n.host = r.host;
    n.addr = r.addr;
    n.nproc = r.nproc;
    if (static_cast<int>(r.ports.size()) == r.nproc) {
      for (int lr = 0; lr < r.nproc; ++lr) {
        n.workers.push_back(WorkerSlot{0, lr, r.ports[static_cast<size_t>(lr)]});
      }
    }
    t.nodes.push_back(std::move(n));
  }
  assign_ranks(t);
  m_members = std::move(members);
  return plan;
}

}  // namespace ddplaunch
