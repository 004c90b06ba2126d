// libFuzzer: the store protocol's decoding, as a client meets it (a reply
// from whatever answers on the master port), as the server meets it (a
// request body, decoded and carried out by the store's KvCore), and as
// frames are cut from a byte stream. Only ProtocolError may come out;
// anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "store/kv_core.hpp"
#include "store/protocol.hpp"

using namespace ddplaunch::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    // A stream of frames: each cut where complete_frame says.
    std::string_view rest = in;
    while (auto len = complete_frame(rest)) {
      rest.remove_prefix(4 + *len > rest.size() ? rest.size() : 4 + *len);
    }
  } catch (const ProtocolError&) {
  }
  // One request body, decoded and carried out as the server does.
  try {
    const Request r = decode_request(in);
    if (r.op != Op::k_hello && r.op != Op::k_auth) {
      ddplaunch::KvCore core;
      const auto now = ddplaunch::KvCore::TimePoint{};
      (void)core.apply(1, r, now);
      (void)core.apply(2, r, now);
      (void)core.close(1);
      (void)core.expire(now + std::chrono::hours(1000));
    }
  } catch (const ProtocolError&) {
  }
  // One reply body, read every way a client reads one.
  auto each = [&](auto read) {
    for (const bool with_id : {true, false}) {
      try {
        read(parse_reply(in, with_id));
      } catch (const ProtocolError&) {
      }
    }
  };
  each([](const Reply& r) { (void)error_message(r); });
  each([](const Reply& r) { (void)read_value(r); });
  each([](const Reply& r) { (void)read_i64(r); });
  each([](const Reply& r) { (void)read_flag(r); });
  each([](const Reply& r) { (void)read_u64(r); });
  each([](const Reply& r) { (void)read_cas_current(r); });
  each([](const Reply& r) { (void)read_hello(r); });
  each([](const Reply& r) { (void)read_multi(r, 3); });
  each([](const Reply& r) { (void)read_multi(r, 4096); });
  try {
    Decoder d(in);
    (void)d.keys();
    (void)d.bytes(1 << 20);
  } catch (const ProtocolError&) {
  }
  return 0;
}
