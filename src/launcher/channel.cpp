#include "launcher/channel.hpp"

#include <algorithm>
#include <stdexcept>

#include "config/integer.hpp"

namespace ddplaunch {

std::string encode_channel_header(const ChannelHeader& header) {
  std::string out(k_channel_magic);
  auto entry = [&out](std::string_view key, std::string_view value) {
    out.append(key).append("=").append(value).push_back('\0');
  };
  if (!header.token.empty()) {
    entry("token", header.token);
  }
  for (const auto& [name, value] : header.env) {
    entry("env", name + "=" + value);
  }
  if (header.store_port > 0) {
    entry("store_port", std::to_string(header.store_port));
  }
  out.push_back('\0');
  return out;
}

std::optional<ChannelHeader> decode_channel_header(std::string_view bytes, size_t& consumed) {
  consumed = 0;
  const size_t magic = std::min(bytes.size(), k_channel_magic.size());
  if (bytes.substr(0, magic) != k_channel_magic.substr(0, magic)) {
    throw std::runtime_error("the launcher channel does not start with '" +
                             std::string(k_channel_magic.substr(0, k_channel_magic.size() - 1)) +
                             "'");
  }
  ChannelHeader header;
  size_t pos = k_channel_magic.size();
  while (pos < bytes.size()) {
    const size_t end = bytes.find('\0', pos);
    if (end == std::string_view::npos) {
      break;
    }
    const std::string_view entry = bytes.substr(pos, end - pos);
    pos = end + 1;
    if (entry.empty()) {
      consumed = pos;
      return header;
    }
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) {
      throw std::runtime_error("a launcher channel entry has no '='");
    }
    const std::string_view key = entry.substr(0, eq);
    const std::string_view value = entry.substr(eq + 1);
    if (key == "token") {
      header.token = std::string(value);
    } else if (key == "env") {
      const size_t veq = value.find('=');
      if (veq == std::string_view::npos || veq == 0) {
        throw std::runtime_error("a launcher channel variable has no name");
      }
      header.env.emplace_back(std::string(value.substr(0, veq)),
                              std::string(value.substr(veq + 1)));
    } else if (key == "store_port") {
      const auto port = parse_integer_in(value, 1, 65535);
      if (!port) {
        throw std::runtime_error("the launcher channel's store port is not a port");
      }
      header.store_port = static_cast<int>(*port);
    }
    // Other keys are a newer launcher's: skipped.
  }
  if (bytes.size() > k_max_channel_header) {
    throw std::runtime_error("the launcher channel's header is over 1 MiB");
  }
  return std::nullopt;
}

}  // namespace ddplaunch
