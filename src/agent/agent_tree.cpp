#include "agent/agent_tree.hpp"

#include <charconv>

#include "log.hpp"
#include "posix/net.hpp"

namespace ddplaunch {

namespace {

// An endpoint record: "<addr> <port>", or 'f' and why there is none.
constexpr char k_no_store = 'f';

}  // namespace

AgentTree::AgentTree(const Config& config, std::string token, std::string addr,
                     StoreConnection& job_store, posix::EventLoop& loop)
    : m_config(config),
      m_token(std::move(token)),
      m_addr(std::move(addr)),
      m_job(job_store),
      m_loop(loop) {}

AgentTree::~AgentTree() {
  // Each client's place on the loop before the client, the clients before
  // the server they talk to.
  m_old_on_loop.reset();
  m_old.reset();
  m_up_on_loop.reset();
  m_up.reset();
  m_down_on_loop.reset();
  m_down.reset();
}

std::string AgentTree::addr_key(int node) const {
  return "tree/" + m_nspace + "/addr/" + std::to_string(node);
}

void AgentTree::begin(const std::string& nspace, int node_rank, int nnodes, int fanout) {
  // The round's fences find it begun when its nodes met.
  if (m_rounds_begun && tree_place(node_rank, nnodes, fanout) == m_place) {
    return;
  }
  start(nspace, node_rank, nnodes, fanout);
}

void AgentTree::begin_round(const std::string& round, int node_rank, int nnodes, int fanout) {
  m_rounds_begun = true;
  start(round, node_rank, nnodes, fanout);
}

void AgentTree::start(const std::string& nspace, int node_rank, int nnodes, int fanout) {
  if (nspace == m_nspace) {
    return;
  }
  m_old_on_loop = std::move(m_up_on_loop);  // the one before goes first
  m_old = std::move(m_up);
  if (!m_published.empty()) {
    m_job.erase(m_published, [] {});
    m_published.clear();
  }
  if (m_parent_asked) {
    // The round before's parent never published its address: the GET
    // parked for it is answered, so that rounds do not pile them up.
    const std::string key = addr_key(m_place.parent);
    m_job.set(key, std::string(1, k_no_store) + "the round ended", [] {});
    m_job.erase(key, [] {});
    m_parent_asked = false;
  }
  m_waiting.clear();
  m_up_error.clear();
  m_parent_where.clear();
  m_nspace = nspace;
  m_place = tree_place(node_rank, nnodes, fanout);
  if (m_place.parent > 0) {
    m_parent_asked = true;
    m_job.get(addr_key(m_place.parent), StoreConnection::Duration(0),
              [this, nspace](std::optional<std::string> endpoint) {
                if (nspace == m_nspace) {
                  m_parent_asked = false;
                  parent_found(endpoint.value_or(""));
                }
              });
  }
  if (m_place.parent < 0 || m_place.children.empty()) {
    return;
  }
  open_store();
  m_published = addr_key(node_rank);
  m_job.set(
      m_published,
      m_server ? m_addr + " " + std::to_string(m_server->port()) : k_no_store + m_server_error,
      [] {});
}

// An interior node's store for its children, and this agent's connection to
// it: made once, kept for the rounds after.
void AgentTree::open_store() {
  if (m_server || !m_server_error.empty()) {
    return;
  }
  StoreOptions options;
  options.token = m_token;
  options.max_clients = Config::k_max_tree_fanout + 8;
  try {
    m_server =
        std::make_unique<StoreServer>(posix::listen_anywhere(0, StoreServer::k_backlog), options);
  } catch (const std::exception& e) {
    m_server_error = std::string("node ") + std::to_string(m_place.node) +
                     " could not open a store for its children in the tree: " + e.what();
    log::warn("{}", m_server_error);
    return;
  }
  m_down = connect("127.0.0.1", m_server->port());
  m_down->set_failure_handler([this](const StoreConnection::Error& e) {
    lost("node " + std::to_string(m_place.node) + " lost its own store for the tree: " + e.message);
  });
  m_down_on_loop = std::make_unique<ClientOnLoop>(m_loop, *m_down);
  log::debug("tree: node {} serves its {} children on port {}", m_place.node,
             m_place.children.size(), m_server->port());
}

std::unique_ptr<AsyncClient> AgentTree::connect(const std::string& host, int port) {
  const auto timeout = millis(m_config.heartbeat_timeout_s);
  return std::make_unique<AsyncClient>(host, port, timeout, timeout,
                                       std::chrono::steady_clock::now(), m_token);
}

StoreConnection* AgentTree::down() {
  if (m_place.children.empty()) {
    return nullptr;
  }
  return m_place.parent < 0 ? &m_job : m_down.get();
}

void AgentTree::up(Ready ready) {
  if (m_place.parent == 0) {
    ready(&m_job, "");
  } else if (!m_up_error.empty()) {
    ready(nullptr, m_up_error);
  } else if (m_up) {
    ready(m_up.get(), "");
  } else {
    m_waiting.push_back(std::move(ready));
  }
}

void AgentTree::parent_found(const std::string& endpoint) {
  const int parent = m_place.parent;
  const auto space = endpoint.rfind(' ');
  int port = 0;
  if (!endpoint.empty() && endpoint[0] == k_no_store) {
    m_up_error = endpoint.substr(1);
  } else if (space == std::string::npos ||
             std::from_chars(endpoint.data() + space + 1, endpoint.data() + endpoint.size(), port)
                     .ec != std::errc() ||
             port <= 0 || port > 65535) {
    m_up_error =
        "node " + std::to_string(parent) + " published no usable address for its store in the tree";
  } else {
    const std::string host = endpoint.substr(0, space);
    m_parent_where = "node " + std::to_string(parent) + " (" + host + ":" + std::to_string(port) +
                     ", its parent in the tree)";
    m_up = connect(host, port);
    m_up->set_failure_handler([this](const StoreConnection::Error& e) {
      m_up_error = "node " + std::to_string(m_place.node) + " lost its link to " + m_parent_where +
                   ": " + e.message;
      lost(m_up_error);
    });
    m_up_on_loop = std::make_unique<ClientOnLoop>(m_loop, *m_up);
    log::debug("tree: node {} links to {}", m_place.node, m_parent_where);
  }
  auto waiting = std::move(m_waiting);
  m_waiting.clear();
  for (auto& ready : waiting) {
    ready(m_up.get(), m_up_error);
  }
}

// Said by the fences it fails (TreeFence::fail), not here: a parent's
// agent that leaves at the job's end closes its children's links too.
void AgentTree::lost(const std::string& why) {
  if (m_lost) {
    m_lost(why);
  }
  for (const Lost& also : m_also_lost) {
    also(why);
  }
}

}  // namespace ddplaunch
