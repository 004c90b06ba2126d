// JsonWriter: JSON appended straight to a string, for the documents too big
// to build as nlohmann values first (`ddplaunch status` of 131,072 ranks).
// Strings are written as nlohmann's dump writes them with
// error_handler_t::replace, byte for byte: invalid UTF-8 becomes U+FFFD, so
// no byte a worker wrote can make the text invalid. Numbers: integers as
// they are, doubles in their shortest round-tripping form with a decimal
// point or an exponent (a non-finite one as null, as nlohmann does). The
// caller keeps the shape (a key before each member's value); commas are the
// writer's. Pure.
#pragma once

#include <fmt/format.h>

#include <concepts>
#include <optional>
#include <string>
#include <string_view>

namespace ddplaunch {

class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : m_out(out) {}

  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  void key(std::string_view name);

  void value(std::string_view s);
  void value(const std::string& s) { value(std::string_view(s)); }
  void value(const char* s) { value(std::string_view(s)); }
  void value(double d);
  void value(bool b);
  void null();
  template <std::integral T>
  void value(T v) {
    if constexpr (std::same_as<T, bool>) {
      value(static_cast<bool>(v));
    } else if constexpr (std::is_signed_v<T>) {
      integer(static_cast<long long>(v));
    } else {
      unsigned_integer(static_cast<unsigned long long>(v));
    }
  }
  template <class T>
  void value(const std::optional<T>& v) {
    if (v) {
      value(*v);
    } else {
      null();
    }
  }

  // key and value.
  template <class T>
  void field(std::string_view name, const T& v) {
    key(name);
    value(v);
  }

 private:
  void comma() {
    if (m_comma) {
      m_out.push_back(',');
    }
  }
  void open(char c) {
    comma();
    m_out.push_back(c);
    m_comma = false;
  }
  void close(char c) {
    m_out.push_back(c);
    m_comma = true;
  }
  void integer(long long v);
  void unsigned_integer(unsigned long long v);
  void digits(const fmt::format_int& text);
  void string(std::string_view s);

  std::string& m_out;
  bool m_comma = false;  // a member or element came before
};

}  // namespace ddplaunch
