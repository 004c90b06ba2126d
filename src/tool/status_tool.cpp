#include "tool/status_tool.hpp"

#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <thread>

#include "config/integer.hpp"
#include "config/launch_error.hpp"
#include "config/options.hpp"
#include "ddplaunch/store_client.hpp"
#include "log.hpp"
#include "posix/fd.hpp"
#include "posix/secret_file.hpp"
#include "rendezvous/status_relay.hpp"
#include "rendezvous/status_responder.hpp"
#include "rendezvous/store_host.hpp"
#include "status/stacks_codec.hpp"
#include "status/status_codec.hpp"
#include "status/status_screen.hpp"
#include "store/protocol.hpp"
#include "store/value_parts.hpp"
#include "topology/tree.hpp"

namespace ddplaunch {

namespace {

using Ms = std::chrono::milliseconds;
constexpr int k_exit_some_missing = 1;
constexpr int k_exit_no_job = 3;
constexpr size_t k_keys_at_once = 1024;
// A stacks answer may be near the store's largest value: as many are read
// at once as one MULTI_GET reply holds at that size (15).
constexpr size_t k_stacks_at_once = protocol::k_max_reply / (protocol::k_max_value + 1024);
static_assert(k_stacks_at_once >= 1);

struct JobAddress {
  std::string host;
  int port = 0;
  std::string token;
  std::vector<std::string> tokens;  // to try in turn (job_tokens())
};

std::string env_value(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it != env.end() ? it->second : "";
}

// NAME=VALUE entries of a process's environment.
EnvMap environ_of(const std::string& pid) {
  EnvMap env;
  const std::string text = posix::read_small_file("/proc/" + pid + "/environ").value_or("");
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\0', at);
    end = end == std::string::npos ? text.size() : end;
    const std::string_view entry(text.data() + at, end - at);
    if (entry.starts_with("DDPLAUNCH_STORE_")) {
      const size_t eq = entry.find('=');
      env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
    }
    at = end + 1;
  }
  return env;
}

std::optional<JobAddress> from_worker_env(const EnvMap& env) {
  const auto port = parse_integer_in(env_value(env, "DDPLAUNCH_STORE_PORT"), 1, 65535);
  if (!port || env_value(env, "DDPLAUNCH_STORE_ADDR").empty()) {
    return std::nullopt;
  }
  return JobAddress{env_value(env, "DDPLAUNCH_STORE_ADDR"),
                    static_cast<int>(*port),
                    env_value(env, "DDPLAUNCH_STORE_TOKEN"),
                    {}};
}

// The jobs of this user on this host, by their workers' environment.
std::vector<JobAddress> jobs_on_this_host() {
  std::map<std::pair<std::string, int>, JobAddress> found;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) {
    return {};
  }
  const std::string self = std::to_string(::getpid());
  while (dirent* ent = readdir(dir)) {
    const std::string pid = ent->d_name;
    struct stat st = {};
    if (!parse_integer(pid) || pid == self || ::stat(("/proc/" + pid).c_str(), &st) != 0 ||
        st.st_uid != ::getuid()) {
      continue;
    }
    if (auto job = from_worker_env(environ_of(pid))) {
      found.emplace(std::make_pair(job->host, job->port), *job);
    }
  }
  closedir(dir);
  std::vector<JobAddress> jobs;
  for (auto& [key, job] : found) {
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// The credentials to try, in turn: the one given (--token-file, else
// $DDPLAUNCH_RDZV_TOKEN), else the one found with the job (a worker's) and
// the token `ddplaunch token init` made, if there is one. A worker's
// credential may not ask for stacks, so stacks try the user's token first;
// a one-node job knows only its workers' credential.
std::vector<std::string> job_tokens(const StatusCommand& cmd, const EnvMap& env,
                                    std::string found) {
  if (!cmd.token_file.empty()) {
    posix::SecretFile file = posix::read_secret_file(
        cmd.token_file, cmd.stacks ? "stacks --token-file" : "status --token-file", false);
    if (!file.warning.empty()) {
      log::warn("{}", file.warning);
    }
    return {std::move(file.secret)};
  }
  if (std::string token = env_value(env, "DDPLAUNCH_RDZV_TOKEN"); !token.empty()) {
    return {token};
  }
  std::vector<std::string> tokens = {std::move(found)};
  const std::string path = user_token_file(env);
  struct stat st = {};
  if (!path.empty() && ::stat(path.c_str(), &st) == 0) {
    try {
      std::string user = posix::read_secret_file(path, "the token file", false).secret;
      if (user != tokens.front()) {
        tokens.insert(cmd.stacks ? tokens.begin() : tokens.end(), std::move(user));
      }
    } catch (const LaunchError& e) {
      log::debug("{}", e.what());
    }
  }
  return tokens;
}

// The job to ask. Throws LaunchError (exit 3) when none is found.
JobAddress find_job(const StatusCommand& cmd, const EnvMap& env) {
  if (cmd.port) {
    return JobAddress{cmd.addr.empty() ? "127.0.0.1" : cmd.addr, *cmd.port, "",
                      job_tokens(cmd, env, env_value(env, "DDPLAUNCH_STORE_TOKEN"))};
  }
  if (auto job = from_worker_env(env)) {
    job->tokens = job_tokens(cmd, env, job->token);
    return *job;
  }
  std::vector<JobAddress> jobs = jobs_on_this_host();
  if (jobs.size() > 1) {
    std::string ports;
    for (const auto& j : jobs) {
      ports += (ports.empty() ? "" : ", ") + std::to_string(j.port);
    }
    throw UsageError(
        fmt::format("{}: {} jobs of yours run on this host (ports {}): give the one to show with "
                    "--master-port",
                    cmd.name(), jobs.size(), ports));
  }
  if (jobs.empty()) {
    throw LaunchError(k_exit_no_job,
                      fmt::format("{}: no ddplaunch job of yours runs on this host (none of your "
                                  "processes is a worker of one): give --master-addr and "
                                  "--master-port of a job's node 0, and its token",
                                  cmd.name()));
  }
  jobs[0].tokens = job_tokens(cmd, env, jobs[0].token);
  return jobs[0];
}

}  // namespace

namespace {

// One request's answers: node 0's first, then the other nodes asked.
struct Answers {
  int64_t n = 0;
  std::vector<int> asked;
  std::vector<std::optional<std::string>> answers;  // stacks: the texts
  std::vector<std::optional<NodeStatus>> statuses;  // status: decoded as they came
  std::optional<std::set<int>> only;                // --nodes
};

// Through the tree of agents: once node 0's children (`keys` after node
// 0's) have answered or the time is up, every answer under the request's
// key, each a node's for its subtree (theirs, and any of a node whose link
// to its parent broke): each node's record goes to its place among the
// nodes asked. Returns the keys read besides node 0's.
template <typename Left>
std::vector<std::string> read_subtrees(StoreClient& store, Answers& a, const RequestKeys& kind,
                                       const std::vector<std::string>& keys, int nnodes, int fanout,
                                       const Left& left) {
  std::vector<int> index(static_cast<size_t>(nnodes), -1);
  for (size_t k = 1; k < a.asked.size(); ++k) {
    index[static_cast<size_t>(a.asked[k])] = static_cast<int>(k);
  }
  a.statuses.resize(a.asked.size());
  store.wait(std::vector<std::string>(keys.begin() + 1, keys.end()), left());
  // Every answer there: node 0's children's, and any of a node whose link to
  // its parent broke.
  const std::string under = kind.request(a.n) + "/";
  store.set_prefix(under);
  const std::vector<std::string> present = store.keys();
  store.set_prefix("");
  std::vector<std::string> parts;
  const auto read = [&store](const std::vector<std::string>& some) {
    return store.multi_get(some);
  };
  for (const std::string& name : present) {
    const std::string key = under + name;
    const std::optional<int> node = subtree_answer_of(key, under, nnodes);
    if (!node) {
      continue;
    }
    parts.push_back(key);
    // One at a time: each may be near the store's largest value.
    std::optional<std::string> text =
        value_parts::assemble(key, std::move(store.multi_get({key})[0]), read, parts);
    if (text) {
      place_subtree(*text, *node, nnodes, fanout, index, a.statuses);
    }
  }
  return parts;
}

// Asks once: node 0 first (it knows the job's size and whether the answers
// travel the tree of agents), then every other node asked (or node 0's
// children in the tree, for their subtrees), until the deadline. The keys are removed after. A
// status answer is decoded as soon as it is read, while the nodes after it are still answering, and
// its text is let go.
Answers ask(StoreClient& store, const StatusCommand& cmd, const RequestKeys& kind) {
  const auto deadline =
      std::chrono::steady_clock::now() + Ms(static_cast<long long>(cmd.timeout_s * 1000));
  auto left = [&deadline] {
    return std::max(Ms(1),
                    std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now()));
  };
  Answers a;
  a.n = store.add(kind.seq(), 1);
  a.only = cmd.nodes.empty() ? std::nullopt : std::optional(parse_rank_list(cmd.nodes, "--nodes"));
  StatusRequest request;
  request.ranks =
      cmd.ranks.empty() ? std::nullopt : std::optional(parse_rank_list(cmd.ranks, "--ranks"));
  request.nodes = a.only;
  request.timeout_s = cmd.timeout_s;
  store.set(kind.request(a.n), encode_status_request(request));
  const std::string first = kind.answer(a.n, 0);
  std::optional<std::string> node0;
  if (store.wait({first}, left())) {
    node0 = store.get(first);
  }
  // A forged answer is read for what it can give; at most 1,000,000 nodes.
  const int nnodes = std::clamp(node0 ? answered_nnodes(*node0).value_or(1) : 1, 1, 1'000'000);
  const auto keep = [&a, &cmd](std::optional<std::string> answer) {
    if (cmd.stacks) {
      a.answers.push_back(std::move(answer));
    } else {
      a.statuses.push_back(answer ? decode_node_status(*answer) : std::nullopt);
    }
  };
  keep(node0);
  std::vector<std::string> keys = {first};
  for (int r = 0; r < nnodes; ++r) {
    if (r == 0 || !a.only || a.only->contains(r)) {
      a.asked.push_back(r);
    }
    if (r > 0 && a.asked.back() == r) {
      keys.push_back(kind.answer(a.n, r));
    }
  }
  const int fanout = !cmd.stacks && !a.statuses.empty() && a.statuses[0] && a.statuses[0]->job
                         ? a.statuses[0]->job->tree_fanout
                         : 0;
  const bool through_tree = tree_has_interior_nodes(nnodes, fanout);
  if (through_tree) {
    // Through the tree of agents: node 0's children answer for their subtrees.
    keys.resize(1);
    for (const int c : tree_place(0, nnodes, fanout).children) {
      keys.push_back(kind.answer(a.n, c));
    }
    std::vector<std::string> parts = read_subtrees(store, a, kind, keys, nnodes, fanout, left);
    keys.insert(keys.end(), parts.begin(), parts.end());
  }
  const size_t at_once = cmd.stacks ? k_stacks_at_once : k_keys_at_once;
  for (size_t i = 1; !through_tree && i < keys.size(); i += at_once) {
    const auto end = std::min(keys.size(), i + at_once);
    const std::vector<std::string> part(keys.begin() + static_cast<std::ptrdiff_t>(i),
                                        keys.begin() + static_cast<std::ptrdiff_t>(end));
    store.wait(part, left());
    for (auto& v : store.multi_get(part)) {
      keep(std::move(v));
    }
  }
  keys.push_back(kind.request(a.n));
  store.remove(keys);
  return a;
}

int terminal_width() {
  winsize ws = {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) {
    return ws.ws_col;
  }
  return 160;
}

}  // namespace

int run_status_command(const StatusCommand& cmd, const EnvMap& env) {
  const char* name = cmd.name();
  const std::optional<JobAddress> job = find_job(cmd, env);
  std::optional<StoreClient> store;
  // A stacks request waits longer for its answers, not for the store.
  const Ms connect(static_cast<long long>(std::min(cmd.timeout_s, 5.0) * 1000));
  for (size_t i = 0; !store; ++i) {
    try {
      store.emplace(job->host, job->port, connect,
                    Ms(static_cast<long long>(cmd.timeout_s * 1000) + 5000), job->tokens.at(i));
      store->set_prefix("");
    } catch (const StoreError& e) {
      if (i + 1 < job->tokens.size()) {
        continue;  // the next credential
      }
      throw LaunchError(k_exit_no_job, fmt::format("{}: no job answers at {}:{}: {}", name,
                                                   job->host, job->port, e.what()));
    }
  }
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  const std::string clear = cmd.watch_s && tty ? "\x1b[H\x1b[2J" : "";
  for (;;) {
    std::string text;
    bool all_answered = true;
    try {
      Answers a = ask(*store, cmd, cmd.stacks ? k_stacks_keys : k_status_keys);
      if (cmd.stacks) {
        const StacksDocument doc = merge_stacks(a.n, a.asked, a.answers, a.only);
        text = cmd.json ? encode_stacks_document(doc) + "\n" : format_stacks(doc);
        all_answered = doc.missing.empty();
      } else {
        const StatusDocument doc = merge_status(a.n, a.asked, std::move(a.statuses), a.only);
        all_answered = doc.missing.empty();
        if (cmd.json) {
          // Written as it is made: a big job's document is tens of MB.
          std::fputs(clear.c_str(), stdout);
          encode_status_document(doc, [](std::string_view piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
          });
          text = "\n";
        } else {
          text = clear + format_status(doc, terminal_width());
        }
      }
    } catch (const StoreRejected& e) {
      // Its requests are the job's own keys: the store refuses them only to
      // a credential that may not ask (stacks need the job's token).
      throw LaunchError(k_exit_no_job,
                        cmd.stacks ? std::string("stacks: the workers' credential may not ask for "
                                                 "stacks: give the job's token with --token-file "
                                                 "FILE or $DDPLAUNCH_RDZV_TOKEN")
                                   : fmt::format("{}: the job's store at {}:{} refused: {}", name,
                                                 job->host, job->port, e.what()));
    } catch (const StoreError& e) {
      throw LaunchError(k_exit_no_job, fmt::format("{}: the job's store at {}:{} failed: {}", name,
                                                   job->host, job->port, e.what()));
    }
    std::fputs(cmd.stacks ? (clear + text).c_str() : text.c_str(), stdout);
    std::fflush(stdout);
    if (!cmd.watch_s) {
      return all_answered ? k_exit_ok : k_exit_some_missing;
    }
    if (!tty && !cmd.json) {
      std::fputs("\n", stdout);
    }
    std::this_thread::sleep_for(Ms(static_cast<long long>(*cmd.watch_s * 1000)));
  }
}

}  // namespace ddplaunch
