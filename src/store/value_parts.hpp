// A value of any size under one key of the store, whose values are at most
// protocol::k_max_value: one under that is stored as itself; a longer one
// in parts of that size under <key>/<i>, then a head under <key> that
// counts them (its first byte k_head: no JSON text starts with it). Each
// reader reads the parts as many at once as one MULTI_GET reply holds.
// Used by the answers that travel the tree of agents (docs/PROTOCOL.md).
// Not thread-safe: the connection's loop drives it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/connection.hpp"

namespace ddplaunch::value_parts {

inline constexpr char k_head = '\x1d';
// At most this many parts (1 GiB): a head naming more is malformed.
inline constexpr size_t k_max_parts = 1024;

// Writes `data` under `key` (its parts first: one connection's requests
// are served in order).
void put(StoreConnection& store, const std::string& key, const std::string& data);

// How many parts a value read under a key says it is in; 0: it is the data
// itself; nullopt: a head that is not a count.
std::optional<size_t> parts_of(std::string_view value);
std::vector<std::string> part_keys(const std::string& key, size_t parts);

// The values of `keys` put together from their parts (nullopt: absent, or a
// part missing or a malformed head), and the part keys read, for the
// caller to erase with the keys.
using Got = std::function<void(std::vector<std::optional<std::string>> values,
                               std::vector<std::string> parts_read)>;
void get_all(StoreConnection& store, const std::vector<std::string>& keys, Got done);

// The same for a caller that reads `heads` itself: `read` gets some part
// keys and gives their values.
using ReadParts =
    std::function<std::vector<std::optional<std::string>>(const std::vector<std::string>& keys)>;
std::optional<std::string> assemble(const std::string& key, std::optional<std::string> head,
                                    const ReadParts& read, std::vector<std::string>& parts_read);

}  // namespace ddplaunch::value_parts
