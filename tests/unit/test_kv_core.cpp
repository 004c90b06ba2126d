// KvCore, the store's state without sockets: each operation's replies, the
// parked requests and their deadlines, the bounds, and ON_CLOSE, as tables
// of requests and the replies they produce.
#include <gtest/gtest.h>

#include "store/kv_core.hpp"

namespace ddplaunch {
namespace {

using namespace std::chrono_literals;
using protocol::Op;
using protocol::Request;
using TimePoint = KvCore::TimePoint;

const TimePoint t0{std::chrono::seconds(100)};

Request req(Op op, uint32_t id, std::string key = {}, std::string value = {}) {
  Request r;
  r.op = op;
  r.id = id;
  r.key = std::move(key);
  r.value = std::move(value);
  return r;
}

Request wait_for(uint32_t id, std::vector<std::string> keys, uint32_t timeout_ms = 0) {
  Request r = req(Op::k_wait, id);
  r.keys = std::move(keys);
  r.timeout_ms = timeout_ms;
  return r;
}

Request get(uint32_t id, std::string key, uint32_t timeout_ms = 0) {
  Request r = req(Op::k_get, id, std::move(key));
  r.timeout_ms = timeout_ms;
  return r;
}

// A reply as (client, id, status, fields).
struct Seen {
  int client;
  uint32_t id;
  protocol::Status status;
  std::string fields;
  bool operator==(const Seen&) const = default;
};

std::vector<Seen> seen(const std::vector<KvCore::Out>& out) {
  std::vector<Seen> s;
  for (const auto& o : out) {
    auto r = protocol::parse_reply(std::string_view(o.frame).substr(4));
    s.push_back({o.client, r.id, r.status, r.fields});
  }
  return s;
}

Seen ok(int client, uint32_t id, const std::string& fields = {}) {
  return {client, id, protocol::Status::k_ok, fields};
}
std::string value_field(const std::string& v) {
  return protocol::Encoder().bytes(v).finish().substr(4);
}

TEST(KvCore, EachOperationsReply) {
  KvCore kv;
  struct Case {
    Request request;
    std::vector<Seen> replies;
  };
  Request add = req(Op::k_add, 3, "n");
  add.delta = 5;
  Request cas_absent = req(Op::k_cas, 4, "c", "first");
  Request cas_lost = req(Op::k_cas, 5, "c", "second");
  Request cas_match = req(Op::k_cas, 6, "c", "third");
  cas_match.expected = "first";
  Request check = req(Op::k_check, 9);
  check.keys = {"a", "n"};
  const std::vector<Case> cases = {
      {req(Op::k_set, 1, "a", "1"), {ok(1, 1)}},
      {get(2, "a"), {ok(1, 2, value_field("1"))}},
      {add, {ok(1, 3, protocol::Encoder().i64(5).finish().substr(4))}},
      {cas_absent, {ok(1, 4, "\x01" + value_field("first"))}},
      {cas_lost, {ok(1, 5, std::string(1, '\0') + value_field("first"))}},
      {cas_match, {ok(1, 6, "\x01" + value_field("third"))}},
      {req(Op::k_delete, 7, "c"), {ok(1, 7, std::string(1, '\x01'))}},
      {req(Op::k_delete, 8, "c"), {ok(1, 8, std::string(1, '\0'))}},
      {check, {ok(1, 9, std::string(1, '\x01'))}},
      {req(Op::k_num_keys, 10), {ok(1, 10, protocol::Encoder().u64(2).finish().substr(4))}},
      {req(Op::k_ping, 11), {ok(1, 11)}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(seen(kv.apply(1, c.request, t0)), c.replies)
        << "op " << static_cast<int>(c.request.op) << " id " << c.request.id;
  }
  EXPECT_EQ(kv.keys(), 2u);
  EXPECT_EQ(kv.bytes(), 2u + 2u) << "\"a\"=\"1\", \"n\"=\"5\"";
}

TEST(KvCore, AParkedGetIsAnsweredByTheWriteAfterTheWritersOwnReply) {
  KvCore kv;
  EXPECT_TRUE(kv.apply(1, get(7, "k"), t0).empty()) << "parked";
  EXPECT_EQ(kv.parked(1), 1u);
  EXPECT_EQ(seen(kv.apply(1, req(Op::k_ping, 8), t0)), (std::vector<Seen>{ok(1, 8)}))
      << "the same client's next request is not held back";
  EXPECT_EQ(seen(kv.apply(2, req(Op::k_set, 1, "k", "v"), t0)),
            (std::vector<Seen>{ok(2, 1), ok(1, 7, value_field("v"))}));
  EXPECT_EQ(kv.parked(1), 0u);
}

// UNWATCH takes back this client's parked GETs and WAITs on one key: each
// is answered TIMEOUT now; another client's, and other keys', stay parked.
TEST(KvCore, UnwatchAnswersOnlyThisClientsParkedRequestsOnTheKey) {
  KvCore kv;
  EXPECT_TRUE(kv.apply(1, get(1, "stop"), t0).empty());
  EXPECT_TRUE(kv.apply(1, wait_for(2, {"stop"}), t0).empty());
  EXPECT_TRUE(kv.apply(1, get(3, "other"), t0).empty());
  EXPECT_TRUE(kv.apply(2, get(1, "stop"), t0).empty());
  const auto timeout = [](int client, uint32_t id) -> Seen {
    return {client, id, protocol::Status::k_timeout, ""};
  };
  EXPECT_EQ(seen(kv.apply(1, req(Op::k_unwatch, 4, "stop"), t0)),
            (std::vector<Seen>{ok(1, 4), timeout(1, 1), timeout(1, 2)}));
  EXPECT_EQ(kv.parked(1), 1u);
  EXPECT_EQ(kv.parked(2), 1u);
  EXPECT_EQ(seen(kv.apply(3, req(Op::k_set, 1, "stop", "v"), t0)),
            (std::vector<Seen>{ok(3, 1), ok(2, 1, value_field("v"))}));
  EXPECT_EQ(seen(kv.apply(1, req(Op::k_unwatch, 5, "nothing"), t0)), (std::vector<Seen>{ok(1, 5)}));
}

TEST(KvCore, AWaitNeedsEveryKeyAndTimesOut) {
  KvCore kv;
  EXPECT_TRUE(kv.apply(1, wait_for(1, {"a", "b"}, 500), t0).empty());
  EXPECT_TRUE(kv.apply(1, wait_for(2, {"a"}), t0).empty());
  EXPECT_EQ(kv.next_deadline(), t0 + 500ms);
  EXPECT_EQ(seen(kv.apply(2, req(Op::k_set, 9, "a", "x"), t0)),
            (std::vector<Seen>{ok(2, 9), ok(1, 2)}));
  EXPECT_TRUE(kv.expire(t0 + 499ms).empty());
  EXPECT_EQ(seen(kv.expire(t0 + 500ms)),
            (std::vector<Seen>{{1, 1, protocol::Status::k_timeout, ""}}));
  EXPECT_FALSE(kv.next_deadline());
}

TEST(KvCore, AWaitIsAnsweredOnlyWhenEveryKeyIsThereAtOnce) {
  // A WAIT remembers how many of its keys it has seen; a key deleted after
  // it was seen must still hold the answer back.
  KvCore kv;
  EXPECT_TRUE(kv.apply(1, wait_for(1, {"a", "b", "c", "a"}), t0).empty());
  EXPECT_EQ(seen(kv.apply(2, req(Op::k_set, 1, "a", "x"), t0)), (std::vector<Seen>{ok(2, 1)}));
  EXPECT_EQ(seen(kv.apply(2, req(Op::k_set, 2, "b", "x"), t0)), (std::vector<Seen>{ok(2, 2)}));
  EXPECT_EQ(seen(kv.apply(2, req(Op::k_delete, 3, "a"), t0)),
            (std::vector<Seen>{ok(2, 3, std::string(1, '\x01'))}));
  EXPECT_EQ(seen(kv.apply(2, req(Op::k_set, 4, "c", "x"), t0)), (std::vector<Seen>{ok(2, 4)}))
      << "a, seen before, was deleted: not answered";
  EXPECT_EQ(kv.parked(1), 1u);
  EXPECT_EQ(seen(kv.apply(2, req(Op::k_set, 5, "a", "y"), t0)),
            (std::vector<Seen>{ok(2, 5), ok(1, 1)}));
  EXPECT_EQ(kv.parked(1), 0u);
}

TEST(KvCore, OnCloseWritesItsWordOnlyIfTheKeyIsAbsent) {
  KvCore kv;
  kv.apply(1, req(Op::k_on_close, 1, "job/stop", "lost"), t0);
  kv.apply(2, req(Op::k_on_close, 1, "job/stop", "also lost"), t0);
  kv.apply(3, get(4, "job/stop"), t0);
  EXPECT_EQ(seen(kv.close(1)), (std::vector<Seen>{ok(3, 4, value_field("lost"))}));
  kv.close(2);
  EXPECT_EQ(*kv.find("job/stop"), "lost") << "the first word stays";
  kv.apply(4, req(Op::k_on_close, 1, "w", "x"), t0);
  kv.apply(4, req(Op::k_on_close, 2, "", ""), t0);  // taken back
  kv.close(4);
  EXPECT_EQ(kv.find("w"), nullptr);
}

TEST(KvCore, AClosedClientsParkedRequestsGoWithIt) {
  KvCore kv;
  kv.apply(1, get(1, "k", 1000), t0);
  kv.close(1);
  EXPECT_FALSE(kv.next_deadline());
  EXPECT_TRUE(kv.apply(2, req(Op::k_set, 1, "k", "v"), t0).size() == 1) << "only the writer's";
}

TEST(KvCore, LimitsAreErrorsForThatRequestOnly) {
  KvCore kv;
  kv.apply(1, req(Op::k_set, 1, "text", "abc"), t0);
  Request add = req(Op::k_add, 2, "text");
  add.delta = 1;
  EXPECT_THROW(kv.apply(1, add, t0), protocol::ProtocolError) << "ADD on a value not a number";
  kv.apply(1, req(Op::k_set, 3, "max", "9223372036854775807"), t0);
  Request over = req(Op::k_add, 4, "max");
  over.delta = 1;
  EXPECT_THROW(kv.apply(1, over, t0), protocol::ProtocolError) << "past 64 bits";
  EXPECT_EQ(*kv.find("max"), "9223372036854775807");
  for (uint32_t i = 0; i < protocol::k_max_parked; ++i) {
    kv.apply(2, get(i, "never"), t0);
  }
  EXPECT_THROW(kv.apply(2, get(99, "never"), t0), protocol::ProtocolError) << "too many parked";
  EXPECT_NO_THROW(kv.apply(3, get(1, "never"), t0)) << "another client is not affected";
  kv.apply(1, req(Op::k_set, 5, "big", std::string(protocol::k_max_value, 'x')), t0);
  Request many = req(Op::k_multi_get, 6);
  many.keys.assign(20, "big");  // 20 MiB of reply
  EXPECT_THROW(kv.apply(1, many, t0), protocol::ProtocolError);
}

// A worker that fills the store (its own keys, or torch's) is refused while
// the launcher's agents still have room: a refused agent's write fails its
// connection to the store, which would end the job.
TEST(KvCore, TheLastOfItsRoomIsKeptForTheLaunchersOwnKeys) {
  KvCore kv(8000, 100);
  kv.apply(1, req(Op::k_set, 1, "user/a", std::string(6900, 'x')), t0);
  EXPECT_THROW(kv.apply(1, req(Op::k_set, 2, "user/b", std::string(100, 'x')), t0),
               protocol::ProtocolError)
      << "past seven eighths of the bytes";
  EXPECT_THROW(kv.apply(1, req(Op::k_set, 3, "rank_0", std::string(100, 'x')), t0),
               protocol::ProtocolError)
      << "torch's keys are the workers' too";
  EXPECT_NO_THROW(kv.apply(2, req(Op::k_set, 4, "job/0/result/3", std::string(500, 'x')), t0));
  EXPECT_NO_THROW(kv.apply(2, req(Op::k_set, 5, "stacks/1/3", std::string(400, 'x')), t0));
  EXPECT_THROW(kv.apply(2, req(Op::k_set, 6, "job/0/result/4", std::string(400, 'x')), t0),
               protocol::ProtocolError)
      << "the launcher's keys have the whole, not more";
  KvCore keys(100000, 10);
  for (uint32_t i = 0; i < 8; ++i) {
    keys.apply(1, req(Op::k_set, i, "w" + std::to_string(i), "1"), t0);
  }
  EXPECT_THROW(keys.apply(1, req(Op::k_set, 9, "w9", "1"), t0), protocol::ProtocolError)
      << "past four fifths of the keys";
  EXPECT_NO_THROW(keys.apply(2, req(Op::k_set, 10, "rdzv/node/0", "{}"), t0));
  EXPECT_NO_THROW(keys.apply(2, req(Op::k_set, 11, "tree/round0.0/addr/1", "a 1"), t0));
}

TEST(KvCore, KeysAreListedSortedByPrefix) {
  KvCore kv;
  for (const char* k : {"user/b", "rdzv/x", "user/a"}) {
    kv.apply(1, req(Op::k_set, 1, k, "1"), t0);
  }
  const auto out = seen(kv.apply(1, req(Op::k_keys, 2, "user/"), t0));
  ASSERT_EQ(out.size(), 1u);
  protocol::Reply r{out[0].id, out[0].status, out[0].fields};
  EXPECT_EQ(protocol::read_keys(r), (std::vector<std::string>{"user/a", "user/b"}));
}

TEST(Protocol, EveryRequestDecodesAsItWasEncoded) {
  auto decode = [](std::string frame, uint32_t id) {
    protocol::set_request_id(frame, id);
    return protocol::decode_request(std::string_view(frame).substr(4));
  };
  auto cas = decode(protocol::request::compare_set("k", std::string("old"), "new"), 7);
  EXPECT_EQ(cas.op, Op::k_cas);
  EXPECT_EQ(cas.id, 7u);
  EXPECT_EQ(cas.expected, "old");
  EXPECT_EQ(cas.value, "new");
  EXPECT_FALSE(decode(protocol::request::compare_set("k", std::nullopt, "v"), 1).expected);
  auto w = decode(protocol::request::wait({"a", "b"}, 250), 9);
  EXPECT_EQ(w.keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(w.timeout_ms, 250u);
  auto unwatch = decode(protocol::request::unwatch("job/0/stop"), 3);
  EXPECT_EQ(unwatch.op, Op::k_unwatch);
  EXPECT_EQ(unwatch.key, "job/0/stop");
  auto add = decode(protocol::request::add("n", -3), 2);
  EXPECT_EQ(add.delta, -3);
  auto hello =
      protocol::decode_request(std::string_view(protocol::request::hello("nonce")).substr(4));
  EXPECT_EQ(hello.magic, protocol::k_magic);
  EXPECT_EQ(hello.version, protocol::k_version);
  EXPECT_EQ(hello.nonce, "nonce");
  EXPECT_THROW(protocol::decode_request("\x4d"), protocol::ProtocolError) << "unknown op";
  EXPECT_THROW(protocol::decode_request(std::string("\x01\0\0\0\x01", 5)), protocol::ProtocolError)
      << "truncated";
}

}  // namespace
}  // namespace ddplaunch
