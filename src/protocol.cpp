#include "ddplaunch/protocol.hpp"

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

uint8_t Decoder::u8() { return static_cast<uint8_t>(take(1)[0]); }
uint16_t Decoder::u16() { return get_be<uint16_t>(take(2)); }
uint32_t Decoder::u32() { return get_be<uint32_t>(take(4)); }
uint64_t Decoder::u64() { return get_be<uint64_t>(take(8)); }

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

std::optional<size_t> complete_frame(std::string_view buffer) {
  if (buffer.size() < 4) {
    return std::nullopt;
  }
  const auto len = get_be<uint32_t>(buffer);
  if (len > k_max_frame) {
    throw ProtocolError("frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                        std::to_string(k_max_frame));
  }
  if (buffer.size() - 4 < len) {
    return std::nullopt;
  }
  return len;
}

}  // namespace ddplaunch::protocol
