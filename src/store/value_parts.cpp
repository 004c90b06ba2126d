#include "store/value_parts.hpp"

#include <memory>

#include "config/integer.hpp"
#include "store/protocol.hpp"

namespace ddplaunch::value_parts {

namespace {

// As many parts as one MULTI_GET reply holds.
constexpr size_t k_parts_at_once = protocol::k_max_reply / (protocol::k_max_value + 1024);
static_assert(k_parts_at_once >= 1);

}  // namespace

void put(StoreConnection& store, const std::string& key, const std::string& data) {
  if (data.size() < protocol::k_max_value && (data.empty() || data[0] != k_head)) {
    store.set(key, data, [] {});
    return;
  }
  const size_t parts = (data.size() + protocol::k_max_value - 1) / protocol::k_max_value;
  const std::vector<std::string> keys = part_keys(key, parts);
  for (size_t i = 0; i < parts; ++i) {
    store.set(keys[i], data.substr(i * protocol::k_max_value, protocol::k_max_value), [] {});
  }
  store.set(key, k_head + std::to_string(parts), [] {});
}

std::optional<size_t> parts_of(std::string_view value) {
  if (value.empty() || value[0] != k_head) {
    return 0;
  }
  const auto n = parse_integer_in(value.substr(1), 1, static_cast<long long>(k_max_parts));
  return n ? std::optional(static_cast<size_t>(*n)) : std::nullopt;
}

std::vector<std::string> part_keys(const std::string& key, size_t parts) {
  std::vector<std::string> keys;
  keys.reserve(parts);
  for (size_t i = 0; i < parts; ++i) {
    keys.push_back(key + "/" + std::to_string(i));
  }
  return keys;
}

std::optional<std::string> assemble(const std::string& key, std::optional<std::string> head,
                                    const ReadParts& read, std::vector<std::string>& parts_read) {
  const std::optional<size_t> parts = head ? parts_of(*head) : std::nullopt;
  if (!parts || *parts == 0) {
    return parts ? std::move(head) : std::nullopt;
  }
  const std::vector<std::string> keys = part_keys(key, *parts);
  parts_read.insert(parts_read.end(), keys.begin(), keys.end());
  std::string all;
  for (size_t i = 0; i < keys.size(); i += k_parts_at_once) {
    const std::vector<std::string> some(
        keys.begin() + static_cast<std::ptrdiff_t>(i),
        keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), i + k_parts_at_once)));
    for (auto& part : read(some)) {
      if (!part) {
        return std::nullopt;
      }
      all += *part;
    }
  }
  return all;
}

namespace {

struct Gather {
  std::vector<std::optional<std::string>> values;
  std::vector<std::string> parts_read;
  size_t left = 1;  // the reads in flight, and the pass that starts them
  Got done;
  void one_done() {
    if (--left == 0) {
      done(std::move(values), std::move(parts_read));
    }
  }
};

// The parts of value `k` (under `key`), each read on its own: a reply holds
// one part, whatever its size.
void get_parts(StoreConnection& store, const std::shared_ptr<Gather>& g, size_t k,
               const std::string& key, size_t parts) {
  const std::vector<std::string> keys = part_keys(key, parts);
  g->parts_read.insert(g->parts_read.end(), keys.begin(), keys.end());
  auto pieces = std::make_shared<std::vector<std::optional<std::string>>>(parts);
  auto left = std::make_shared<size_t>(parts);
  ++g->left;
  for (size_t i = 0; i < parts; ++i) {
    store.get(keys[i], StoreConnection::Duration(1),
              [g, k, i, pieces, left](std::optional<std::string> v) {
                (*pieces)[i] = std::move(v);
                if (--*left > 0) {
                  return;
                }
                std::string all;
                for (auto& p : *pieces) {
                  if (!p) {
                    g->one_done();  // a part missing: none
                    return;
                  }
                  all += *p;
                }
                g->values[k] = std::move(all);
                g->one_done();
              });
  }
}

}  // namespace

void get_all(StoreConnection& store, const std::vector<std::string>& keys, Got done) {
  auto g = std::make_shared<Gather>();
  g->values.resize(keys.size());
  g->done = std::move(done);
  for (size_t k = 0; k < keys.size(); ++k) {
    ++g->left;
    store.get(keys[k], StoreConnection::Duration(1),
              [&store, g, k, key = keys[k]](std::optional<std::string> head) {
                const std::optional<size_t> parts = head ? parts_of(*head) : std::nullopt;
                if (parts && *parts == 0) {
                  g->values[k] = std::move(head);
                } else if (parts) {
                  get_parts(store, g, k, key, *parts);
                }
                g->one_done();
              });
  }
  g->one_done();
}

}  // namespace ddplaunch::value_parts
