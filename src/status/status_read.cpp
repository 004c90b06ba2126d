// The status codec's reading half (status_codec.hpp): nlohmann's SAX events
// put straight into the records, no JSON values in between (a 16,384-node
// job's answers are 131,072 ranks). Pure.
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>

#include "status/status_codec.hpp"

namespace ddplaunch {

namespace {

using json = nlohmann::json;

// --- reading: nlohmann's SAX events straight into the records ----------------------

// The member a key names (monostate: none this codec knows, skipped).
using Slot =
    std::variant<std::monostate, int*, int64_t*, long long*, double*, std::string*,
                 std::optional<double>*, std::optional<long long>*, std::optional<std::string>*,
                 std::optional<unsigned long long>*, std::optional<JobStatus>*,
                 std::vector<RankStatus>*, std::vector<LostNodeStatus>*, std::vector<NodeStatus>*,
                 std::vector<int>*>;
using Record = std::variant<LostNodeStatus*, JobStatus*, RankStatus*, NodeStatus*, StatusDocument*>;

Slot slot_of(LostNodeStatus& l, std::string_view k) {
  if (k == "node_rank")
    return &l.node_rank;
  if (k == "host")
    return &l.host;
  if (k == "addr")
    return &l.addr;
  if (k == "round")
    return &l.round;
  if (k == "time")
    return &l.time;
  return {};
}

Slot slot_of(JobStatus& s, std::string_view k) {
  if (k == "run_id")
    return &s.run_id;
  if (k == "round")
    return &s.round;
  if (k == "restarts")
    return &s.restarts;
  if (k == "max_restarts")
    return &s.max_restarts;
  if (k == "nnodes")
    return &s.nnodes;
  if (k == "nnodes_expected")
    return &s.nnodes_expected;
  if (k == "world_size")
    return &s.world_size;
  if (k == "start_time")
    return &s.start_time;
  if (k == "elapsed_s")
    return &s.elapsed_s;
  if (k == "lost_nodes")
    return &s.lost_nodes;
  if (k == "tree_fanout")
    return &s.tree_fanout;
  return {};
}

Slot slot_of(RankStatus& r, std::string_view k) {
  if (k == "rank")
    return &r.rank;
  if (k == "local_rank")
    return &r.local_rank;
  if (k == "node_rank")
    return &r.node_rank;
  if (k == "pid")
    return &r.pid;
  if (k == "state")
    return &r.state;
  if (k == "run_s")
    return &r.run_s;
  if (k == "progress_events")
    return &r.progress_events;
  if (k == "since_progress_s")
    return &r.since_progress_s;
  if (k == "last_line")
    return &r.last_line;
  if (k == "cpu_s")
    return &r.cpu_s;
  if (k == "cpu_percent")
    return &r.cpu_percent;
  if (k == "rss_kib")
    return &r.rss_kib;
  if (k == "processes")
    return &r.processes;
  if (k == "exit")
    return &r.exit;
  if (k == "gpu_memory_bytes")
    return &r.gpu_memory_bytes;
  return {};
}

Slot slot_of(NodeStatus& n, std::string_view k) {
  if (k == "node_rank")
    return &n.node_rank;
  if (k == "host")
    return &n.host;
  if (k == "addr")
    return &n.addr;
  if (k == "state")
    return &n.state;
  if (k == "agent_pid")
    return &n.agent_pid;
  if (k == "agent_cpu_s")
    return &n.agent_cpu_s;
  if (k == "agent_rss_kib")
    return &n.agent_rss_kib;
  if (k == "round")
    return &n.round;
  if (k == "round_start_time")
    return &n.round_start_time;
  if (k == "local_ranks")
    return &n.local_ranks;
  if (k == "job")
    return &n.job;
  if (k == "ranks")
    return &n.ranks;
  return {};
}

Slot slot_of(StatusDocument& d, std::string_view k) {
  if (k == "request")
    return &d.request;
  if (k == "job")
    return &d.job;
  if (k == "nodes")
    return &d.nodes;
  if (k == "ranks")
    return &d.ranks;
  if (k == "missing")
    return &d.missing;
  return {};
}

bool is_list(const Slot& slot) {
  return std::holds_alternative<std::vector<RankStatus>*>(slot) ||
         std::holds_alternative<std::vector<NodeStatus>*>(slot) ||
         std::holds_alternative<std::vector<LostNodeStatus>*>(slot) ||
         std::holds_alternative<std::vector<int>*>(slot);
}

// A scalar as the parser gave it.
struct Scalar {
  enum Kind { null, boolean, integer, unsigned_integer, floating, string } kind;
  long long i = 0;
  unsigned long long u = 0;
  double d = 0;
  std::string* s = nullptr;
};

template <class T>
bool set_integer(T& field, const Scalar& v) {
  using limits = std::numeric_limits<T>;
  if (v.kind == Scalar::integer && v.i >= static_cast<long long>(limits::min()) &&
      static_cast<unsigned long long>(std::max(v.i, 0LL)) <=
          static_cast<unsigned long long>(limits::max())) {
    field = static_cast<T>(v.i);
    return true;
  }
  if (v.kind == Scalar::unsigned_integer && v.u <= static_cast<unsigned long long>(limits::max())) {
    field = static_cast<T>(v.u);
    return true;
  }
  return false;
}

bool set_number(double& field, const Scalar& v) {
  switch (v.kind) {
    case Scalar::integer:
      field = static_cast<double>(v.i);
      return true;
    case Scalar::unsigned_integer:
      field = static_cast<double>(v.u);
      return true;
    case Scalar::floating:
      field = v.d;
      return true;
    default:
      return false;
  }
}

bool set_scalar(int& f, const Scalar& v) {
  return set_integer(f, v);
}
bool set_scalar(int64_t& f, const Scalar& v) {
  return set_integer(f, v);
}
bool set_scalar(long long& f, const Scalar& v) {
  return set_integer(f, v);
}
bool set_scalar(unsigned long long& f, const Scalar& v) {
  return set_integer(f, v);
}
bool set_scalar(double& f, const Scalar& v) {
  return set_number(f, v);
}
bool set_scalar(std::string& f, const Scalar& v) {
  if (v.kind != Scalar::string) {
    return false;
  }
  f = std::move(*v.s);
  return true;
}
template <class T>
bool set_scalar(std::optional<T>& f, const Scalar& v) {
  T value{};
  if (!set_scalar(value, v)) {
    return false;
  }
  f = std::move(value);
  return true;
}
template <class T>
bool set_scalar(T&, const Scalar&) {
  return false;  // a record or a list, given a scalar
}

// nlohmann's SAX handler: the events of one record's text, put straight
// into it. Any value of the wrong type stops the parse (the record does
// not decode); members it does not know are skipped, however deep.
class RecordReader {
 public:
  using json = nlohmann::json;

  explicit RecordReader(Record root) : m_root(root) {}

  bool null() { return scalar({Scalar::null}); }
  bool boolean(bool) { return scalar({Scalar::boolean}); }
  bool number_integer(json::number_integer_t v) { return scalar({Scalar::integer, v}); }
  bool number_unsigned(json::number_unsigned_t v) {
    return scalar({Scalar::unsigned_integer, 0, v});
  }
  bool number_float(json::number_float_t v, const json::string_t&) {
    return scalar({Scalar::floating, 0, 0, v});
  }
  bool string(json::string_t& v) { return scalar({Scalar::string, 0, 0, 0, &v}); }
  bool binary(json::binary_t&) { return false; }

  bool key(json::string_t& k) {
    Frame& f = m_stack.back();
    if (f.kind == Frame::in_record) {
      f.slot = std::visit([&](auto* r) { return slot_of(*r, k); }, f.target);
    }
    return true;
  }

  bool start_object(std::size_t) {
    if (m_stack.empty()) {
      m_stack.push_back({Frame::in_record, m_root});
      return true;
    }
    Frame& f = m_stack.back();
    if (f.kind == Frame::skipping) {
      ++f.depth;
      return true;
    }
    if (f.kind == Frame::in_record) {
      if (std::holds_alternative<std::monostate>(f.slot)) {
        m_stack.push_back({Frame::skipping});
      } else if (auto* job = std::get_if<std::optional<JobStatus>*>(&f.slot)) {
        m_stack.push_back({Frame::in_record, &(*job)->emplace()});
      } else {
        return false;
      }
      return true;
    }
    // An element of a list of records.
    if (auto* ranks = std::get_if<std::vector<RankStatus>*>(&f.slot)) {
      m_stack.push_back({Frame::in_record, &(*ranks)->emplace_back()});
    } else if (auto* nodes = std::get_if<std::vector<NodeStatus>*>(&f.slot)) {
      m_stack.push_back({Frame::in_record, &(*nodes)->emplace_back()});
    } else if (auto* lost = std::get_if<std::vector<LostNodeStatus>*>(&f.slot)) {
      // At most 1,024 lost nodes are read: a forged answer cannot grow a screen.
      if ((*lost)->size() < 1024) {
        m_stack.push_back({Frame::in_record, &(*lost)->emplace_back()});
      } else {
        m_stack.push_back({Frame::skipping});
      }
    } else {
      return false;
    }
    return true;
  }

  bool start_array(std::size_t) {
    if (m_stack.empty()) {
      return false;  // a record is an object
    }
    Frame& f = m_stack.back();
    if (f.kind == Frame::skipping) {
      ++f.depth;
      return true;
    }
    if (f.kind == Frame::in_list) {
      return false;  // no list this codec reads holds lists
    }
    if (std::holds_alternative<std::monostate>(f.slot)) {
      m_stack.push_back({Frame::skipping});
      return true;
    }
    if (!is_list(f.slot)) {
      return false;
    }
    m_stack.push_back({Frame::in_list, {}, f.slot});
    return true;
  }

  bool end_object() { return end(); }
  bool end_array() { return end(); }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

 private:
  struct Frame {
    enum Kind { in_record, in_list, skipping } kind;
    Record target{};
    Slot slot{};    // record: the member its last key named; array: the list
    int depth = 0;  // skip: how deep inside the skipped value
  };

  bool scalar(const Scalar& v) {
    if (m_stack.empty()) {
      return false;  // a record is an object
    }
    Frame& f = m_stack.back();
    switch (f.kind) {
      case Frame::skipping:
        return true;
      case Frame::in_record:
        if (v.kind == Scalar::null) {
          return true;  // as absent
        }
        return std::visit(
            [&](auto p) {
              if constexpr (std::is_same_v<decltype(p), std::monostate>) {
                return true;
              } else {
                return set_scalar(*p, v);
              }
            },
            f.slot);
      case Frame::in_list:
        if (auto* list = std::get_if<std::vector<int>*>(&f.slot)) {
          int n = 0;
          if (!set_integer(n, v)) {
            return false;
          }
          (*list)->push_back(n);
          return true;
        }
        return false;  // a list of records holds records
    }
    return false;
  }

  bool end() {
    Frame& f = m_stack.back();
    if (f.kind == Frame::skipping && f.depth > 0) {
      --f.depth;
    } else {
      m_stack.pop_back();
    }
    return true;
  }

  Record m_root;
  std::vector<Frame> m_stack;
};

template <class T>
std::optional<T> read_record(std::string_view text) {
  T record;
  RecordReader reader(&record);
  try {
    if (!nlohmann::json::sax_parse(text, &reader)) {
      return std::nullopt;
    }
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return record;
}
}  // namespace

std::optional<NodeStatus> decode_node_status(std::string_view text) {
  return read_record<NodeStatus>(text);
}

std::optional<StatusDocument> decode_status_document(std::string_view text) {
  return read_record<StatusDocument>(text);
}

std::vector<std::optional<NodeStatus>> decode_answers(
    std::vector<std::optional<std::string>> answers) {
  std::vector<std::optional<NodeStatus>> out;
  out.reserve(answers.size());
  for (auto& a : answers) {
    out.push_back(a ? decode_node_status(*a) : std::nullopt);
    a.reset();  // its memory serves the next records
  }
  return out;
}

void place_subtree_answer(std::string_view text, int first, int end, const std::vector<int>& index,
                          std::vector<std::optional<NodeStatus>>& answers) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty()) {
      continue;
    }
    std::optional<NodeStatus> node = decode_node_status(line);
    if (!node || node->node_rank < first || node->node_rank >= end ||
        static_cast<size_t>(node->node_rank) >= index.size()) {
      continue;
    }
    const int at = index[static_cast<size_t>(node->node_rank)];
    if (at >= 0 && static_cast<size_t>(at) < answers.size() && !answers[static_cast<size_t>(at)]) {
      answers[static_cast<size_t>(at)] = std::move(node);
    }
  }
}

}  // namespace ddplaunch
