// libFuzzer: the store protocol's decoding, as a client meets it (a reply
// from whatever answers on the master port), as the server meets it (a
// request body, decoded and carried out by the store's KvCore), as frames
// are cut from a byte stream, and as a session's sealed frames are opened
// (a forged or changed one must fail its check; what is sealed must open).
// Only ProtocolError may come out; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "store/auth.hpp"
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
  // Sealed frames: bytes that did not come from the key's holder never open
  // (a tag is 128 bits), and what is sealed opens once, in order.
  {
    static const auto keys = ddplaunch::auth::session_keys("fuzz token", "c", "s");
    ddplaunch::auth::FrameMac receiver(keys.client_to_server);
    std::string_view rest = in;
    try {
      while (auto len = complete_frame(rest)) {
        if (4 + *len > rest.size()) {
          break;
        }
        std::string_view payload;
        if (receiver.open(rest.substr(4, *len), payload)) {
          std::abort();  // a forgery opened
        }
        rest.remove_prefix(4 + *len);
      }
    } catch (const ProtocolError&) {
    }
    ddplaunch::auth::FrameMac sender(keys.client_to_server);
    ddplaunch::auth::FrameMac opener(keys.client_to_server);
    std::string frame = std::string(4, '\0') + std::string(in.substr(0, 1024));
    const auto n = static_cast<uint32_t>(frame.size() - 4);
    for (int i = 0; i < 4; ++i) {
      frame[static_cast<size_t>(i)] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
    }
    std::string twice;
    sender.seal(frame + frame, twice);
    std::string_view stream = twice;
    for (int i = 0; i < 2; ++i) {
      const auto len = complete_frame(stream);
      std::string_view payload;
      if (!len || !opener.open(stream.substr(4, *len), payload) ||
          payload != std::string_view(frame).substr(4)) {
        std::abort();  // what was sealed did not open
      }
      stream.remove_prefix(4 + *len);
    }
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
