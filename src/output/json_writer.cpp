#include "output/json_writer.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iterator>

namespace ddplaunch {

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (Unicode's table
// 3-7); -1 where s[i] cannot start one; -(k + 1) where its first k bytes
// were fine and s[i + k] cannot go on (or the text ended before it).
int utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = b(i);
  if (lead < 0x80) {
    return 1;
  }
  int length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    lo = lead == 0xE0 ? 0xA0 : 0x80;
    hi = lead == 0xED ? 0x9F : 0xBF;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    lo = lead == 0xF0 ? 0x90 : 0x80;
    hi = lead == 0xF4 ? 0x8F : 0xBF;
  } else {
    return -1;
  }
  for (int k = 1; k < length; ++k) {
    if (i + k >= s.size()) {
      return -(k + 1);
    }
    const unsigned char c = b(i + k);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) {
      return -(k + 1);
    }
  }
  return length;
}

// The letter after the backslash of a character JSON escapes by one (0: none).
char short_escape(unsigned char c) {
  switch (c) {
    case '"':
      return '"';
    case '\\':
      return '\\';
    case '\b':
      return 'b';
    case '\f':
      return 'f';
    case '\n':
      return 'n';
    case '\r':
      return 'r';
    case '\t':
      return 't';
    default:
      return 0;
  }
}

}  // namespace

void JsonWriter::key(std::string_view name) {
  comma();
  string(name);
  m_out.push_back(':');
  m_comma = false;
}

void JsonWriter::value(std::string_view s) {
  comma();
  string(s);
  m_comma = true;
}

void JsonWriter::value(double d) {
  comma();
  m_comma = true;
  if (!std::isfinite(d)) {
    m_out += "null";
    return;
  }
  const size_t at = m_out.size();
  fmt::format_to(std::back_inserter(m_out), "{}", d);
  if (m_out.find_first_of(".e", at) == std::string::npos) {
    m_out += ".0";
  }
}

void JsonWriter::value(bool b) {
  comma();
  m_out += b ? "true" : "false";
  m_comma = true;
}

void JsonWriter::null() {
  comma();
  m_out += "null";
  m_comma = true;
}

void JsonWriter::integer(long long v) {
  digits(fmt::format_int(v));
}

void JsonWriter::unsigned_integer(unsigned long long v) {
  digits(fmt::format_int(v));
}

void JsonWriter::digits(const fmt::format_int& text) {
  comma();
  m_out.append(text.data(), text.size());
  m_comma = true;
}

void JsonWriter::string(std::string_view s) {
  static constexpr char k_hex[] = "0123456789abcdef";
  m_out.push_back('"');
  size_t plain = 0;  // the start of the bytes not yet copied
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    const int n = c < 0x80 ? 1 : utf8_sequence(s, i);
    if (n > 1) {
      i += n;
      continue;
    }
    m_out.append(s.data() + plain, i - plain);
    if (n == 1) {
      m_out.push_back('\\');
      if (const char e = short_escape(c); e != 0) {
        m_out.push_back(e);
      } else {
        m_out += "u00";
        m_out.push_back(k_hex[c >> 4]);
        m_out.push_back(k_hex[c & 0xF]);
      }
      ++i;
    } else {
      // Invalid: one U+FFFD for the bytes up to the one that broke the
      // sequence, which is read again as the start of the next.
      m_out += "\xEF\xBF\xBD";
      i += n == -1 ? 1 : static_cast<size_t>(-n - 1);
    }
    plain = i;
  }
  m_out.append(s.data() + plain, s.size() - plain);
  m_out.push_back('"');
}

}  // namespace ddplaunch
