#include "store/kv_core.hpp"

#include <algorithm>
#include <charconv>

#include "config/integer.hpp"

namespace ddplaunch {

namespace {

using protocol::Op;
using protocol::ProtocolError;
namespace reply = protocol::reply;

}  // namespace

size_t KvCore::parked(Client client) const {
  auto it = m_clients.find(client);
  return it == m_clients.end() ? 0 : it->second.parked.size();
}

const std::string* KvCore::find(const std::string& key) const {
  auto it = m_data.find(key);
  return it == m_data.end() ? nullptr : &it->second;
}

std::optional<KvCore::TimePoint> KvCore::next_deadline() const {
  if (m_deadlines.empty()) {
    return std::nullopt;
  }
  return m_deadlines.begin()->first;
}

bool KvCore::launcher_key(const std::string& key) {
  for (const char* prefix : {"rdzv/", "job/", "tree/", "mpi/", "status/", "stacks/"}) {
    if (key.starts_with(prefix)) {
      return true;
    }
  }
  return false;
}

void KvCore::check_room(const std::string& key, size_t value_size) const {
  const bool launcher = launcher_key(key);
  const char* kept = launcher ? "" : ": its last part is kept for the launcher's own keys";
  const size_t max_keys = launcher ? m_max_keys : m_max_keys - m_max_keys / 5;
  const size_t max_bytes = launcher ? m_max_bytes : m_max_bytes - m_max_bytes / 8;
  auto it = m_data.find(key);
  if (it == m_data.end() && m_data.size() >= max_keys) {
    throw ProtocolError("the store is full (" + std::to_string(m_data.size()) + " keys" + kept +
                        ")");
  }
  const size_t old = it == m_data.end() ? 0 : key.size() + it->second.size();
  if (m_bytes - old + key.size() + value_size > max_bytes) {
    throw ProtocolError("the store is full (" + std::to_string(m_bytes) + " bytes" + kept + ")");
  }
}

void KvCore::write(const std::string& key, std::string value, std::vector<Out>& out) {
  auto [it, inserted] = m_data.try_emplace(key);
  m_bytes -= inserted ? 0 : key.size() + it->second.size();
  it->second = std::move(value);
  m_bytes += key.size() + it->second.size();
  auto w = m_watchers.find(key);
  if (w == m_watchers.end()) {
    return;
  }
  const std::vector<uint64_t> waiting(w->second.begin(), w->second.end());
  for (const uint64_t seq : waiting) {
    try_answer(seq, out);  // answering touches only the replies, never another write
  }
}

bool KvCore::try_answer(uint64_t seq, std::vector<Out>& out) {
  auto it = m_parked.find(seq);
  if (it == m_parked.end()) {
    return false;
  }
  Parked& p = it->second;
  while (p.present < p.keys.size() && m_data.contains(p.keys[p.present])) {
    ++p.present;
  }
  if (p.present < p.keys.size()) {
    return false;
  }
  for (size_t i = 0; i < p.keys.size(); ++i) {
    if (!m_data.contains(p.keys[i])) {
      p.present = i;  // deleted since it was seen
      return false;
    }
  }
  out.push_back(
      {p.client, p.is_get ? reply::ok_value(p.id, m_data.at(p.keys[0])) : reply::ok(p.id)});
  unpark(seq);
  return true;
}

void KvCore::unpark(uint64_t seq) {
  auto it = m_parked.find(seq);
  if (it == m_parked.end()) {
    return;
  }
  const Parked& p = it->second;
  for (const auto& k : p.keys) {
    auto w = m_watchers.find(k);
    if (w != m_watchers.end()) {
      w->second.erase(seq);
      if (w->second.empty()) {
        m_watchers.erase(w);
      }
    }
  }
  if (p.deadline) {
    m_deadlines.erase({*p.deadline, seq});
  }
  if (auto c = m_clients.find(p.client); c != m_clients.end()) {
    c->second.parked.erase(seq);
  }
  m_parked.erase(it);
}

void KvCore::park(Client client, protocol::Request& r, bool is_get, TimePoint now,
                  std::vector<Out>& out) {
  ClientState& state = m_clients[client];
  if (state.parked.size() >= protocol::k_max_parked) {
    throw ProtocolError("more than " + std::to_string(protocol::k_max_parked) +
                        " GET or WAIT requests wait at once on one connection; wait for "
                        "their answers first, or use another connection");
  }
  const uint64_t seq = m_next_seq++;
  Parked p{client, r.id, is_get,
           is_get ? std::vector<std::string>{std::move(r.key)} : std::move(r.keys), std::nullopt};
  if (r.timeout_ms != 0) {
    p.deadline = now + std::chrono::milliseconds(r.timeout_ms);
  }
  for (const auto& k : p.keys) {
    m_watchers[k].insert(seq);
  }
  if (p.deadline) {
    m_deadlines.emplace(*p.deadline, seq);
  }
  state.parked.insert(seq);
  m_parked.emplace(seq, std::move(p));
  try_answer(seq, out);
}

std::string KvCore::add(const protocol::Request& r, std::vector<Out>& out) {
  int64_t current = 0;
  if (const std::string* held = find(r.key)) {
    const auto number = parse_integer(*held);
    if (!number) {
      throw ProtocolError("ADD on key '" + r.key + "' whose value is not a number");
    }
    current = *number;
  }
  if (__builtin_add_overflow(current, r.delta, &current)) {
    throw ProtocolError("ADD on key '" + r.key + "' overflows a 64-bit integer");
  }
  check_room(r.key, 20);
  std::string reply = reply::ok_i64(r.id, current);
  write(r.key, std::to_string(current), out);
  return reply;
}

std::string KvCore::compare_set(protocol::Request& r, std::vector<Out>& out) {
  const std::string* held = find(r.key);
  const bool swap = r.expected ? held != nullptr && *held == *r.expected : held == nullptr;
  if (!swap) {
    return reply::ok_cas(r.id, false, held != nullptr ? *held : std::string());
  }
  check_room(r.key, r.value.size());
  std::string reply = reply::ok_cas(r.id, true, r.value);
  write(r.key, std::move(r.value), out);
  return reply;
}

std::string KvCore::multi_get(const protocol::Request& r) const {
  size_t size = 5;
  std::vector<std::optional<std::string>> values;
  values.reserve(r.keys.size());
  for (const auto& k : r.keys) {
    const std::string* held = find(k);
    size += 5 + (held != nullptr ? held->size() : 0);
    if (size > protocol::k_max_reply) {
      throw ProtocolError("MULTI_GET would reply with more than " +
                          std::to_string(protocol::k_max_reply) +
                          " bytes, over the limit; ask for fewer keys");
    }
    values.push_back(held != nullptr ? std::optional(*held) : std::nullopt);
  }
  return reply::ok_multi(r.id, values);
}

std::string KvCore::keys_with_prefix(const protocol::Request& r) const {
  std::vector<std::string> found;
  size_t size = 9;
  for (const auto& [key, value] : m_data) {
    if (key.starts_with(r.key)) {
      size += 4 + key.size();
      if (size > protocol::k_max_reply) {
        throw ProtocolError("KEYS would reply with more than " +
                            std::to_string(protocol::k_max_reply) +
                            " bytes, over the limit; give a longer prefix");
      }
      found.push_back(key);
    }
  }
  std::sort(found.begin(), found.end());
  return reply::ok_keys(r.id, found);
}

std::vector<KvCore::Out> KvCore::apply(Client client, protocol::Request r, TimePoint now) {
  std::vector<Out> out;
  // The request's own reply comes before those its write answers.
  auto answer = [&out, client](std::string frame) {
    out.insert(out.begin(), Out{client, std::move(frame)});
  };
  switch (r.op) {
    case Op::k_hello:
    case Op::k_auth:
      throw ProtocolError("HELLO or AUTH out of turn");
    case Op::k_set: {
      check_room(r.key, r.value.size());
      write(r.key, std::move(r.value), out);
      answer(reply::ok(r.id));
      break;
    }
    case Op::k_get:
      park(client, r, true, now, out);
      break;
    case Op::k_wait:
      park(client, r, false, now, out);
      break;
    case Op::k_add:
      answer(add(r, out));
      break;
    case Op::k_cas:
      answer(compare_set(r, out));
      break;
    case Op::k_delete: {
      auto it = m_data.find(r.key);
      const bool existed = it != m_data.end();
      if (existed) {
        m_bytes -= it->first.size() + it->second.size();
        m_data.erase(it);
      }
      answer(reply::ok_u8(r.id, existed ? 1 : 0));
      break;
    }
    case Op::k_check: {
      const bool all = std::all_of(r.keys.begin(), r.keys.end(),
                                   [this](const std::string& k) { return m_data.contains(k); });
      answer(reply::ok_u8(r.id, all ? 1 : 0));
      break;
    }
    case Op::k_num_keys:
      answer(reply::ok_u64(r.id, m_data.size()));
      break;
    case Op::k_multi_get:
      answer(multi_get(r));
      break;
    case Op::k_ping:
      answer(reply::ok(r.id));
      break;
    case Op::k_keys:
      answer(keys_with_prefix(r));
      break;
    case Op::k_unwatch: {
      // Over this client's parked requests (a few), not the key's watchers
      // (node 0's store has one per node on a round's verdict).
      std::vector<uint64_t> taken;
      for (const uint64_t seq : m_clients[client].parked) {
        const Parked& p = m_parked.at(seq);
        if (std::find(p.keys.begin(), p.keys.end(), r.key) != p.keys.end()) {
          taken.push_back(seq);
        }
      }
      for (const uint64_t seq : taken) {
        out.push_back({client, reply::timeout(m_parked.at(seq).id)});
        unpark(seq);
      }
      answer(reply::ok(r.id));
      break;
    }
    case Op::k_on_close: {
      ClientState& state = m_clients[client];
      if (r.key.empty()) {
        state.on_close.reset();
      } else {
        state.on_close.emplace(std::move(r.key), std::move(r.value));
      }
      answer(reply::ok(r.id));
      break;
    }
  }
  return out;
}

std::vector<KvCore::Out> KvCore::close(Client client) {
  std::vector<Out> out;
  auto it = m_clients.find(client);
  if (it == m_clients.end()) {
    return out;
  }
  const std::vector<uint64_t> parked(it->second.parked.begin(), it->second.parked.end());
  for (const uint64_t seq : parked) {
    unpark(seq);
  }
  auto last_word = std::move(it->second.on_close);
  m_clients.erase(client);
  if (last_word && !m_data.contains(last_word->first)) {
    try {
      check_room(last_word->first, last_word->second.size());
      write(last_word->first, std::move(last_word->second), out);
    } catch (const ProtocolError&) {
      // the store is full: the word is lost, as a SET would be refused
    }
  }
  return out;
}

std::vector<KvCore::Out> KvCore::expire(TimePoint now) {
  std::vector<Out> out;
  while (!m_deadlines.empty() && m_deadlines.begin()->first <= now) {
    const uint64_t seq = m_deadlines.begin()->second;
    const Parked& p = m_parked.at(seq);
    out.push_back({p.client, reply::timeout(p.id)});
    unpark(seq);
  }
  return out;
}

}  // namespace ddplaunch
