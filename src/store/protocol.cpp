#include "store/protocol.hpp"

namespace ddplaunch::protocol {

namespace {

template <typename T>
void put_be(std::string& out, T v) {
  for (int shift = static_cast<int>(sizeof(T) * 8) - 8; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

template <typename T>
T get_be(std::string_view in) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v = static_cast<T>((v << 8) | static_cast<uint8_t>(in[i]));
  }
  return v;
}

}  // namespace

Encoder& Encoder::u8(uint8_t v) {
  m_buf.push_back(static_cast<char>(v));
  return *this;
}
Encoder& Encoder::u16(uint16_t v) {
  put_be(m_buf, v);
  return *this;
}
Encoder& Encoder::u32(uint32_t v) {
  put_be(m_buf, v);
  return *this;
}
Encoder& Encoder::u64(uint64_t v) {
  put_be(m_buf, v);
  return *this;
}
Encoder& Encoder::bytes(std::string_view v) {
  u32(static_cast<uint32_t>(v.size()));
  m_buf.append(v);
  return *this;
}

std::string Encoder::finish() {
  const auto len = static_cast<uint32_t>(m_buf.size() - 4);
  for (int i = 0; i < 4; ++i) {
    m_buf[static_cast<size_t>(i)] = static_cast<char>((len >> (24 - 8 * i)) & 0xff);
  }
  return std::move(m_buf);
}

std::string_view Decoder::take(size_t n) {
  if (m_rest.size() < n) {
    throw ProtocolError("truncated message");
  }
  auto out = m_rest.substr(0, n);
  m_rest.remove_prefix(n);
  return out;
}

uint8_t Decoder::u8() {
  return static_cast<uint8_t>(take(1)[0]);
}
uint16_t Decoder::u16() {
  return get_be<uint16_t>(take(2));
}
uint32_t Decoder::u32() {
  return get_be<uint32_t>(take(4));
}
uint64_t Decoder::u64() {
  return get_be<uint64_t>(take(8));
}

std::string Decoder::bytes(size_t max_size) {
  uint32_t n = u32();
  if (n > max_size) {
    throw ProtocolError("field of " + std::to_string(n) + " bytes exceeds the limit of " +
                        std::to_string(max_size));
  }
  return std::string(take(n));
}

std::vector<std::string> Decoder::keys() {
  uint32_t n = u32();
  if (n > k_max_keys_per_request) {
    throw ProtocolError(std::to_string(n) + " keys in one request exceed the limit of " +
                        std::to_string(k_max_keys_per_request));
  }
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    out.push_back(bytes(k_max_key));
  }
  return out;
}

std::optional<size_t> complete_frame(std::string_view buffer, size_t max) {
  if (buffer.size() < 4) {
    return std::nullopt;
  }
  const auto len = get_be<uint32_t>(buffer);
  if (len > max) {
    throw ProtocolError("frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                        std::to_string(max));
  }
  if (buffer.size() - 4 < len) {
    return std::nullopt;
  }
  return len;
}

namespace request {

namespace {
Encoder op(Op o) {
  Encoder e;
  e.u8(static_cast<uint8_t>(o)).u32(0);  // the id, stamped by the client
  return e;
}
Encoder& put_keys(Encoder& e, const std::vector<std::string>& keys) {
  e.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    e.bytes(k);
  }
  return e;
}
}  // namespace

std::string hello(std::string_view client_nonce) {
  Encoder e;  // no id: its layout is the same in every version
  return e.u8(static_cast<uint8_t>(Op::k_hello))
      .u32(k_magic)
      .u16(k_version)
      .bytes(client_nonce)
      .finish();
}
std::string auth(std::string_view client_proof) {
  return op(Op::k_auth).bytes(client_proof).finish();
}
std::string set(std::string_view key, std::string_view value) {
  return op(Op::k_set).bytes(key).bytes(value).finish();
}
std::string get(std::string_view key, uint32_t timeout_ms) {
  return op(Op::k_get).bytes(key).u32(timeout_ms).finish();
}
std::string add(std::string_view key, int64_t delta) {
  return op(Op::k_add).bytes(key).i64(delta).finish();
}
std::string compare_set(std::string_view key, const std::optional<std::string>& expected,
                        std::string_view desired) {
  return op(Op::k_cas)
      .bytes(key)
      .u8(expected ? 0 : 1)
      .bytes(expected.value_or(""))
      .bytes(desired)
      .finish();
}
std::string remove(std::string_view key) {
  return op(Op::k_delete).bytes(key).finish();
}
std::string wait(const std::vector<std::string>& keys, uint32_t timeout_ms) {
  auto e = op(Op::k_wait);
  return put_keys(e, keys).u32(timeout_ms).finish();
}
std::string check(const std::vector<std::string>& keys) {
  auto e = op(Op::k_check);
  return put_keys(e, keys).finish();
}
std::string num_keys() {
  return op(Op::k_num_keys).finish();
}
std::string multi_get(const std::vector<std::string>& keys) {
  auto e = op(Op::k_multi_get);
  return put_keys(e, keys).finish();
}
std::string ping() {
  return op(Op::k_ping).finish();
}

std::string on_close(std::string_view key, std::string_view value) {
  return op(Op::k_on_close).bytes(key).bytes(value).finish();
}

std::string keys(std::string_view prefix) {
  return op(Op::k_keys).bytes(prefix).finish();
}

std::string unwatch(std::string_view key) {
  return op(Op::k_unwatch).bytes(key).finish();
}

}  // namespace request

namespace reply {

namespace {
Encoder status(uint32_t id, Status s) {
  Encoder e;
  e.u32(id).u8(static_cast<uint8_t>(s));
  return e;
}
}  // namespace

std::string ok(uint32_t id) {
  return status(id, Status::k_ok).finish();
}
std::string ok_u8(uint32_t id, uint8_t v) {
  return status(id, Status::k_ok).u8(v).finish();
}
std::string ok_u64(uint32_t id, uint64_t v) {
  return status(id, Status::k_ok).u64(v).finish();
}
std::string ok_i64(uint32_t id, int64_t v) {
  return status(id, Status::k_ok).i64(v).finish();
}
std::string ok_value(uint32_t id, std::string_view value) {
  return status(id, Status::k_ok).bytes(value).finish();
}
std::string ok_cas(uint32_t id, bool swapped, std::string_view current) {
  return status(id, Status::k_ok).u8(swapped ? 1 : 0).bytes(current).finish();
}
std::string ok_multi(uint32_t id, const std::vector<std::optional<std::string>>& values) {
  auto e = status(id, Status::k_ok);
  for (const auto& v : values) {
    e.u8(v ? 1 : 0).bytes(v ? *v : std::string_view());
  }
  return e.finish();
}
std::string ok_keys(uint32_t id, const std::vector<std::string>& keys) {
  auto e = status(id, Status::k_ok);
  e.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    e.bytes(k);
  }
  return e.finish();
}
std::string timeout(uint32_t id) {
  return status(id, Status::k_timeout).finish();
}
std::string error(uint32_t id, std::string_view message) {
  return status(id, Status::k_error).bytes(message).finish();
}
std::string ok_hello(bool auth, std::string_view server_nonce, std::string_view server_proof,
                     std::string_view worker_proof) {
  Encoder e;
  e.u8(static_cast<uint8_t>(Status::k_ok)).u16(k_version).u8(auth ? 1 : 0);
  if (auth) {
    e.bytes(server_nonce).bytes(server_proof);
    if (!worker_proof.empty()) {
      e.bytes(worker_proof);
    }
  }
  return e.finish();
}
std::string hello_error(std::string_view message, Status s) {
  Encoder e;
  return e.u8(static_cast<uint8_t>(s)).bytes(message).finish();
}
std::string busy(uint32_t id, std::string_view message) {
  return status(id, Status::k_busy).bytes(message).finish();
}

}  // namespace reply

void set_request_id(std::string& frame, uint32_t id) {
  if (frame.size() < 9) {
    throw ProtocolError("not a request frame");
  }
  for (size_t i = 0; i < 4; ++i) {
    frame[5 + i] = static_cast<char>((id >> (24 - 8 * i)) & 0xff);
  }
}

Request decode_request(std::string_view body) {
  Decoder d(body);
  Request r;
  const uint8_t op = d.u8();
  if (op > static_cast<uint8_t>(Op::k_unwatch)) {
    throw ProtocolError("unknown operation " + std::to_string(op));
  }
  r.op = static_cast<Op>(op);
  if (r.op == Op::k_hello) {
    r.magic = d.u32();
    r.version = d.u16();
    r.nonce = d.bytes(256);
    return r;
  }
  r.id = d.u32();
  switch (r.op) {
    case Op::k_hello:
      break;
    case Op::k_auth:
      r.nonce = d.bytes(256);
      break;
    case Op::k_set:
      r.key = d.bytes(k_max_key);
      r.value = d.bytes(k_max_value);
      break;
    case Op::k_get:
      r.key = d.bytes(k_max_key);
      r.timeout_ms = d.u32();
      break;
    case Op::k_add:
      r.key = d.bytes(k_max_key);
      r.delta = d.i64();
      break;
    case Op::k_cas: {
      r.key = d.bytes(k_max_key);
      const bool expect_absent = d.u8() != 0;
      std::string expected = d.bytes(k_max_value);
      if (!expect_absent) {
        r.expected = std::move(expected);
      }
      r.value = d.bytes(k_max_value);
      break;
    }
    case Op::k_delete:
      r.key = d.bytes(k_max_key);
      break;
    case Op::k_wait:
      r.keys = d.keys();
      r.timeout_ms = d.u32();
      break;
    case Op::k_check:
    case Op::k_multi_get:
      r.keys = d.keys();
      break;
    case Op::k_num_keys:
    case Op::k_ping:
      break;
    case Op::k_on_close:
      r.key = d.bytes(k_max_key);
      r.value = d.bytes(k_max_on_close);
      break;
    case Op::k_keys:
    case Op::k_unwatch:
      r.key = d.bytes(k_max_key);
      break;
  }
  return r;
}

Reply parse_reply(std::string_view body, bool with_id) {
  Decoder d(body);
  Reply r;
  if (with_id) {
    r.id = d.u32();
  }
  const uint8_t status = d.u8();
  if (status > static_cast<uint8_t>(Status::k_busy)) {
    throw ProtocolError("unknown reply status " + std::to_string(status));
  }
  r.status = static_cast<Status>(status);
  r.fields = std::string(body.substr(with_id ? 5 : 1));
  return r;
}

std::string error_message(const Reply& r) {
  return Decoder(r.fields).bytes(k_max_frame);
}
std::string read_value(const Reply& r) {
  return Decoder(r.fields).bytes(k_max_value);
}
int64_t read_i64(const Reply& r) {
  return Decoder(r.fields).i64();
}
bool read_flag(const Reply& r) {
  return Decoder(r.fields).u8() != 0;
}
uint64_t read_u64(const Reply& r) {
  return Decoder(r.fields).u64();
}

std::vector<std::string> read_keys(const Reply& r) {
  Decoder d(r.fields);
  const uint32_t n = d.u32();
  std::vector<std::string> keys;
  keys.reserve(std::min<uint32_t>(n, 65536));
  for (uint32_t i = 0; i < n; ++i) {
    keys.push_back(d.bytes(k_max_key));
  }
  return keys;
}

std::string read_cas_current(const Reply& r) {
  Decoder d(r.fields);
  d.u8();
  return d.bytes(k_max_value);
}

HelloReply read_hello(const Reply& r) {
  Decoder d(r.fields);
  HelloReply h;
  h.version = d.u16();
  h.auth = d.u8() != 0;
  if (h.auth) {
    h.server_nonce = d.bytes(256);
    h.server_proof = d.bytes(256);
    if (!d.done()) {
      h.worker_proof = d.bytes(256);
    }
  }
  return h;
}

std::vector<std::optional<std::string>> read_multi(const Reply& r, size_t count) {
  Decoder d(r.fields);
  std::vector<std::optional<std::string>> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const bool present = d.u8() != 0;
    auto v = d.bytes(k_max_value);
    out.push_back(present ? std::optional(std::move(v)) : std::nullopt);
  }
  return out;
}

}  // namespace ddplaunch::protocol
