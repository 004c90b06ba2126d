// The store's wire protocol: framing, opcodes, limits, and one codec per
// operation: the request encoders the clients use and the decoder the server
// uses sit side by side, as do the reply encoders and readers. Every integer
// is big-endian (network order); every frame is a u32 body length followed by
// the body. Every request but HELLO carries a u32 id that its reply repeats:
// replies may come out of order (a parked GET never holds back a CAS). See
// docs/PROTOCOL.md. No I/O here.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddplaunch::protocol {

inline constexpr uint32_t k_magic = 0x44444c31;  // "DDL1"
// 2: HELLO carries a nonce; AUTH. 3: ON_CLOSE. 4: KEYS. 5: request ids, replies out of order.
// 6: an authenticated session after AUTH (every frame sealed), BUSY, AUTH answered first.
inline constexpr uint16_t k_version = 7;

// Limits: a peer exceeding one gets an error reply and loses its connection.
inline constexpr size_t k_max_key = 4096;               // bytes in a key
inline constexpr size_t k_max_value = 1024 * 1024;      // bytes in a value
inline constexpr size_t k_max_keys_per_request = 4096;  // keys in WAIT/CHECK/MULTI_GET
inline constexpr size_t k_max_frame = 2 * 1024 * 1024;  // bytes in one frame body
// Bytes in a frame body before the handshake is done (HELLO and AUTH need
// under 64): a larger one closes the connection before it is buffered.
inline constexpr size_t k_max_handshake_frame = 256;
inline constexpr size_t k_frame_tag = 16;              // a sealed frame's tag (auth::k_tag_bytes)
inline constexpr size_t k_max_store_keys = 1'000'000;  // keys held by the server
inline constexpr size_t k_max_store_bytes = 512 * 1024 * 1024;  // key and value bytes held
inline constexpr size_t k_max_reply = 16 * 1024 * 1024;         // bytes in one reply (MULTI_GET)
inline constexpr size_t k_max_on_close = 64 * 1024;             // bytes in an ON_CLOSE value
inline constexpr size_t k_max_parked = 32;  // GET/WAIT requests parked at once on one connection

// After HELLO, every request body is `u8 op, u32 id, fields` and every reply
// body `u32 id, u8 status, fields`. HELLO and its reply carry no id (their
// layout never changes, so a client of another version is told so).
enum class Op : uint8_t {
  // u32 magic, u16 version, client nonce -> OK u16 version, u8 auth[, server nonce, server proof]
  k_hello = 0,
  k_set = 1,        // key, value                        -> OK
  k_get = 2,        // key, u32 timeout_ms (0 = forever) -> OK value | TIMEOUT
  k_add = 3,        // key, i64 delta                    -> OK i64 new value
  k_cas = 4,        // key, u8 expect_absent, expected, desired -> OK u8 swapped, current value
  k_delete = 5,     // key                               -> OK u8 existed
  k_wait = 6,       // u32 n, n keys, u32 timeout_ms     -> OK | TIMEOUT
  k_check = 7,      // u32 n, n keys                     -> OK u8 all exist
  k_num_keys = 8,   //                                   -> OK u64 count
  k_multi_get = 9,  // u32 n, n keys                     -> OK n × (u8 present, value)
  k_ping = 10,      //                                   -> OK
  k_auth = 11,      // client proof                      -> OK (else ERROR, and closed)
  // key, value: when this connection closes, the server sets key to value if
  // the key is absent then (an empty key: no longer). One per connection.
  k_on_close = 12,  //                                   -> OK
  k_keys = 13,      // prefix                            -> OK u32 n, n keys (sorted)
  // key: this connection's GETs and WAITs parked on key are answered
  // TIMEOUT now (its reader reads that value elsewhere).
  k_unwatch = 14,  //                                    -> OK
};

enum class Status : uint8_t {
  k_ok = 0,
  k_timeout = 1,
  k_error = 2,  // followed by a message string; the server then closes the connection
  // No slot free for this client now (--rdzv-max-clients): followed by a
  // message string; the connection closes, and the client tries again later.
  k_busy = 3,
};

// A malformed or over-limit message.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds one frame. Strings are u32 length + bytes.
class Encoder {
 public:
  Encoder() { m_buf.resize(4); }
  Encoder& u8(uint8_t v);
  Encoder& u16(uint16_t v);
  Encoder& u32(uint32_t v);
  Encoder& u64(uint64_t v);
  Encoder& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Encoder& bytes(std::string_view v);
  // The finished frame (length prefix filled in).
  std::string finish();

 private:
  std::string m_buf;
};

// Reads one frame body; every getter throws ProtocolError past the end.
class Decoder {
 public:
  // Decoder keeps a view: the body must outlive it (a temporary cannot).
  explicit Decoder(std::string_view body) : m_rest(body) {}
  explicit Decoder(std::string&& body) = delete;
  uint8_t u8();
  uint16_t u16();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::string bytes(size_t max_size);
  std::vector<std::string> keys();
  bool done() const { return m_rest.empty(); }

 private:
  std::string_view take(size_t n);
  std::string_view m_rest;
};

// --- Requests: one encoder per operation, used by both clients -------------
// Each encoder writes id 0; the client stamps its own with set_request_id().
namespace request {
std::string hello(std::string_view client_nonce);
std::string auth(std::string_view client_proof);
std::string set(std::string_view key, std::string_view value);
std::string get(std::string_view key, uint32_t timeout_ms);
std::string add(std::string_view key, int64_t delta);
// expected == nullopt: swap only if the key is absent.
std::string compare_set(std::string_view key, const std::optional<std::string>& expected,
                        std::string_view desired);
std::string remove(std::string_view key);
std::string wait(const std::vector<std::string>& keys, uint32_t timeout_ms);
std::string check(const std::vector<std::string>& keys);
std::string num_keys();
std::string multi_get(const std::vector<std::string>& keys);
std::string ping();
std::string on_close(std::string_view key, std::string_view value);
std::string keys(std::string_view prefix);
std::string unwatch(std::string_view key);
}  // namespace request

// Writes `id` into a request frame made by request::* (not HELLO's).
void set_request_id(std::string& frame, uint32_t id);

// A request as the server reads it: the fields its operation carries.
struct Request {
  Op op = Op::k_ping;
  uint32_t id = 0;
  std::string key;                      // SET GET ADD CAS DELETE ON_CLOSE; KEYS: the prefix
  std::string value;                    // SET, ON_CLOSE; CAS: desired
  std::optional<std::string> expected;  // CAS: nullopt swaps only if the key is absent
  int64_t delta = 0;                    // ADD
  std::vector<std::string> keys;        // WAIT CHECK MULTI_GET
  uint32_t timeout_ms = 0;              // GET WAIT (0: none)
  uint32_t magic = 0;                   // HELLO
  uint16_t version = 0;                 // HELLO
  std::string nonce;                    // HELLO: the client's nonce; AUTH: the client's proof
};
// Decodes one request body within the limits; throws ProtocolError for a
// malformed one, an over-limit field or an unknown operation.
Request decode_request(std::string_view body);

// --- Replies: the server's encoders and the clients' readers ----------------
// Each takes the id of the request it answers.
namespace reply {
std::string ok(uint32_t id);
std::string ok_u8(uint32_t id, uint8_t v);
std::string ok_u64(uint32_t id, uint64_t v);
std::string ok_i64(uint32_t id, int64_t v);
std::string ok_value(uint32_t id, std::string_view value);
std::string ok_cas(uint32_t id, bool swapped, std::string_view current);
std::string ok_multi(uint32_t id, const std::vector<std::optional<std::string>>& values);
std::string ok_keys(uint32_t id, const std::vector<std::string>& keys);
std::string timeout(uint32_t id);
std::string error(uint32_t id, std::string_view message);
// HELLO's answer (no id): the version, and for a store with a token its
// nonce and proof, and a second proof for the workers' credential when it
// has one.
std::string ok_hello(bool auth, std::string_view server_nonce, std::string_view server_proof,
                     std::string_view worker_proof = {});
// An ERROR (or BUSY) before or instead of HELLO's answer (no id).
std::string hello_error(std::string_view message, Status status = Status::k_error);
std::string busy(uint32_t id, std::string_view message);
}  // namespace reply

// A reply frame's body split into its id, its status and the fields after it.
// Throws ProtocolError for a short body or an unknown status.
struct Reply {
  uint32_t id = 0;
  Status status = Status::k_ok;
  std::string fields;  // for k_error: the encoded message (read with error_message)
};
// `with_id`: false for HELLO's answer (and an error in its place).
Reply parse_reply(std::string_view body, bool with_id = true);
std::string error_message(const Reply& r);
std::string read_value(const Reply& r);              // GET
int64_t read_i64(const Reply& r);                    // ADD
bool read_flag(const Reply& r);                      // DELETE, CHECK
uint64_t read_u64(const Reply& r);                   // NUM_KEYS
std::vector<std::string> read_keys(const Reply& r);  // KEYS
std::string read_cas_current(const Reply& r);        // CAS: the value held afterwards
struct HelloReply {
  uint16_t version = 0;
  bool auth = false;
  std::string server_nonce;
  std::string server_proof;
  std::string worker_proof;  // empty: the store admits the job's token alone
};
HelloReply read_hello(const Reply& r);
std::vector<std::optional<std::string>> read_multi(const Reply& r, size_t count);  // MULTI_GET

// If `buffer` starts with a complete frame, its body's size; nullopt when
// more bytes are needed. Throws ProtocolError for a length over `max`.
std::optional<size_t> complete_frame(std::string_view buffer,
                                     size_t max = k_max_frame + k_frame_tag);

}  // namespace ddplaunch::protocol
