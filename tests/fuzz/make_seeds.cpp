// Writes the seed corpus of each fuzz target (tests/fuzz/corpus/<target>/)
// from the real encoders, so seeds follow the formats as they change:
//   make_seeds tests/fuzz/corpus
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rendezvous/records.hpp"
#include "status/status_codec.hpp"
#include "store/protocol.hpp"

using namespace ddplaunch;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string args(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) {
    out += (i ? std::string(1, '\0') : "") + argv[i];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
  namespace rp = protocol::reply;
  // The request encoders, each frame stamped with an id as a client does.
  struct Stamped {
    uint32_t next = 1;
    std::string operator()(std::string frame) {
      protocol::set_request_id(frame, next++);
      return frame;
    }
  };
  Stamped id;
  struct Requests {
    Stamped& id;
    std::string set(const std::string& k, const std::string& v) {
      return id(protocol::request::set(k, v));
    }
    std::string get(const std::string& k, uint32_t t) { return id(protocol::request::get(k, t)); }
    std::string num_keys() { return id(protocol::request::num_keys()); }
    std::string add(const std::string& k, int64_t d) { return id(protocol::request::add(k, d)); }
    std::string compare_set(const std::string& k, const std::optional<std::string>& e,
                            const std::string& d) {
      return id(protocol::request::compare_set(k, e, d));
    }
    std::string remove(const std::string& k) { return id(protocol::request::remove(k)); }
    std::string check(const std::vector<std::string>& k) { return id(protocol::request::check(k)); }
    std::string wait(const std::vector<std::string>& k, uint32_t t) {
      return id(protocol::request::wait(k, t));
    }
    std::string multi_get(const std::vector<std::string>& k) {
      return id(protocol::request::multi_get(k));
    }
    std::string ping() { return id(protocol::request::ping()); }
    std::string on_close(const std::string& k, const std::string& v) {
      return id(protocol::request::on_close(k, v));
    }
    std::string hello(const std::string& n) { return protocol::request::hello(n); }
    std::string auth(const std::string& p) { return id(protocol::request::auth(p)); }
  };
  Requests rq{id};
  // What a client sends (after the HELLO fuzz_store_server adds for even first bytes).
  const fs::path server = root / "fuzz_store_server";
  put(server, "set_get", "\0" + rq.set("k", "v") + rq.get("k", 10) + rq.num_keys());
  put(server, "add_cas",
      "\0" + rq.add("n", 5) + rq.compare_set("k", std::nullopt, "d") + rq.remove("k") +
          rq.check({"k", "n"}));
  put(server, "wait_multi",
      "\0" + rq.wait({"a", "b"}, 5) + rq.set("a", "1") + rq.multi_get({"a", "b", "c"}) + rq.ping());
  put(server, "raw_hello", "\1" + rq.hello("n") + rq.auth("proof"));
  put(server, "parked_then_set",
      "\0" + rq.get("a", 0) + rq.wait({"a", "b"}, 0) + rq.on_close("b", "gone") + rq.set("a", "1"));
  // What a client reads back.
  const fs::path proto = root / "fuzz_protocol";
  auto body = [](const std::string& frame) { return frame.substr(4); };
  put(proto, "ok_value", body(rp::ok_value(1, "value")));
  put(proto, "error", body(rp::hello_error("too many clients")));
  put(proto, "hello", body(rp::ok_hello(true, "server-nonce", "proof")));
  put(proto, "cas", body(rp::ok_cas(2, true, "current")));
  put(proto, "i64", body(rp::ok_i64(3, -7)));
  put(proto, "multi", body(rp::ok_multi(4, {std::string("v"), std::nullopt})));
  put(proto, "frames", rq.set("k", "v") + rq.get("k", 0));
  // What the server decodes.
  put(proto, "request_cas", body(rq.compare_set("k", std::string("old"), "new")));
  put(proto, "request_wait", body(rq.wait({"a", "b"}, 9)));
  put(proto, "request_hello", body(rq.hello("nonce")));
  // What agents read from the store.
  const fs::path records = root / "fuzz_records";
  JoinRecord join;
  join.run_id = "job";
  join.argv = {"python3", "train.py"};
  join.nnodes = 2;
  join.nproc = 4;
  join.host = "gpu-1";
  join.addr = "10.0.0.1";
  join.ports = {29500, 29501};
  put(records, "join", encode_join(join));
  put(records, "plan_failed", encode_plan(TopologyRecord{std::nullopt, "timed out"}));
  Topology topology = uniform_topology(3, 4, 1, "gpu-1", "10.0.0.1", "10.0.0.1", 29500);
  topology.nodes[1].nproc = 2;  // mixed sizes: three runs
  assign_ranks(topology);
  put(records, "plan", encode_plan(TopologyRecord{topology, ""}));
  for (auto& n : topology.nodes) {  // --env-style tf: every node, with ports
    for (auto& w : n.workers) {
      w.port = 29600 + w.rank;
    }
  }
  put(records, "plan_tf", encode_plan(TopologyRecord{topology, ""}));
  put(records, "assignment", encode_assignment(2));
  put(records, "answer_refused", encode_answer(JoinAnswer{-1, "more agents joined", false}));
  put(records, "answer_wait", encode_answer(JoinAnswer{-1, "", true}));
  JobVerdict verdict{7, "node 1 (gpu-2) received SIGTERM", std::nullopt, 1};
  put(records, "verdict", encode_verdict(verdict));
  RankOutcome outcome;
  outcome.rank = 3;
  outcome.local_rank = 1;
  outcome.node_rank = 1;
  outcome.host = "gpu-2";
  outcome.pid = 4242;
  outcome.last_stderr = {"Traceback (most recent call last):", "ValueError: \xe6\x97\xa5"};
  put(records, "outcomes", encode_outcomes({outcome}));
  WorkerError error;
  error.message = "RuntimeError: x";
  error.traceback = "Traceback\n";
  error.timestamp = "17";
  put(records, "error_file", encode_error_file(error, 1));
  NodeStatus node;
  node.node_rank = 1;
  node.host = "gpu-2";
  node.state = "running";
  node.agent_pid = 99;
  node.job = JobStatus{"j", 1, 0, 3, 2, "1:4", 8, 1.7e9, 2.5, {{3, "h", "10.0.0.3", 0, 1.5}}};
  RankStatus rank;
  rank.rank = 4;
  rank.state = "failed";
  rank.last_line = "loss \xe6\x97\xa5";
  rank.exit = "exited with code 1";
  rank.gpu_memory_bytes = 1ULL << 33;
  node.ranks = {rank, rank};
  node.ranks[1].since_progress_s = 0.25;
  put(records, "status_answer", encode_node_status(node));
  NodeStatus three = node;
  three.node_rank = 3;
  three.job.reset();
  NodeStatus five = three;
  five.node_rank = 5;
  put(records, "status_subtree",
      encode_node_status(three) + "\n\n" + encode_node_status(five) + "\n" +
          encode_node_status(node));
  put(records, "status_document",
      encode_status_document(merge_status(1, {0, 1}, {std::nullopt, node}, std::nullopt)));
  // What users type.
  const fs::path argv_dir = root / "fuzz_argv";
  put(argv_dir, "torchrun",
      args({"--nnodes", "2", "--nproc-per-node", "4", "--rdzv-endpoint", "host:29400", "--",
            "train.py", "--lr", "0.1"}));
  put(argv_dir, "elastic",
      args({"--nnodes=1:4", "--max-restarts", "3", "--env-style", "tf,mpi", "-m", "pkg.mod"}));
  put(argv_dir, "legacy",
      args({"--use_env", "--master_addr", "[::1]", "--master_port", "0", "--tee", "3", "--log-dir",
            "/tmp/l", "x.py"}));
  // What Slurm writes.
  const fs::path nodes = root / "fuzz_nodelist";
  put(nodes, "ranges", "n[01-04,07]");
  put(nodes, "groups", "rack[1-2]-n[01-02],gpu-3.local");
  put(nodes, "tasks", "2(x3),1");
  // What workers print: three bytes of settings (prefix length, line bound,
  // vector width and read size), then the output.
  const fs::path lines = root / "fuzz_lines";
  std::string flood;
  for (int i = 0; i < 40; ++i) {
    flood += std::string(static_cast<size_t>(i * 7 % 130), static_cast<char>('a' + i % 26)) + "\n";
  }
  put(lines, "flood", std::string("\x09\xff\x02") + flood);
  put(lines, "bounded", std::string("\x10\x40\x01") + flood + "unfinished");
  put(lines, "progress",
      std::string("\x05\xff\x02") + "epoch 1\n 10%\r 50%\r100%\r\ndone\r\n" + flood);
  return 0;
}
