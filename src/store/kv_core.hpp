// KvCore: the store's state without sockets, threads or a clock: the keys
// and values (within protocol.hpp's bounds), the GET and WAIT requests parked
// until their keys exist or their deadline passes, and each client's ON_CLOSE
// word. StoreServer feeds it decoded requests from its connections; the
// rendezvous unit tests drive it in memory as their fake store. Each call
// returns the replies it produced, in order: the request's own (unless it
// parked) and those of parked requests that its write answered. Pure: time
// comes in as an argument. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/protocol.hpp"

namespace ddplaunch {

class KvCore {
 public:
  using Client = int;  // any number that names one connection
  using TimePoint = std::chrono::steady_clock::time_point;

  // The bounds on what it holds (tests give smaller ones). The last eighth
  // of the bytes and the last fifth of the keys are kept for the launcher's
  // own keys (launcher_key()): a worker that fills the store is refused
  // before the agents' writes are, whose refusal would end the job.
  explicit KvCore(size_t max_bytes = protocol::k_max_store_bytes,
                  size_t max_keys = protocol::k_max_store_keys)
      : m_max_bytes(max_bytes), m_max_keys(max_keys) {}
  // Under the launcher's own prefixes: rdzv/, job/, tree/, mpi/, status/, stacks/.
  static bool launcher_key(const std::string& key);
  struct Out {
    Client client;
    std::string frame;  // a reply frame (protocol::reply::*)
  };

  // Carries out one request of `client` (not HELLO or AUTH: the connection's
  // handshake is its owner's). Throws protocol::ProtocolError when it breaks
  // a limit (the store is full, ADD on a value that is not a number or past
  // 64 bits, a reply over the limit, too many parked requests): the caller
  // answers with that error and closes the client.
  // The request's values are moved into the store.
  std::vector<Out> apply(Client client, protocol::Request request, TimePoint now);
  // The client went away: its parked requests are dropped, and its ON_CLOSE
  // word is written if that key is absent (which may answer others).
  std::vector<Out> close(Client client);
  // Answers TIMEOUT to every parked request whose deadline is at or before `now`.
  std::vector<Out> expire(TimePoint now);
  // The nearest deadline of a parked request.
  std::optional<TimePoint> next_deadline() const;

  size_t keys() const { return m_data.size(); }
  size_t bytes() const { return m_bytes; }
  size_t parked(Client client) const;
  const std::string* find(const std::string& key) const;

 private:
  struct Parked {
    Client client;
    uint32_t id;
    bool is_get;
    std::vector<std::string> keys;
    std::optional<TimePoint> deadline;
    // keys[0, present) were found when last looked at: a write of one
    // more key checks from here, so a WAIT of K keys costs O(K) in all,
    // not O(K) per write.
    size_t present = 0;
  };
  struct ClientState {
    std::set<uint64_t> parked;
    std::optional<std::pair<std::string, std::string>> on_close;
  };

  void check_room(const std::string& key, size_t value_size) const;
  // Stores the value and answers the parked requests it completes.
  void write(const std::string& key, std::string value, std::vector<Out>& out);  // moved in
  void park(Client client, protocol::Request& r, bool is_get, TimePoint now, std::vector<Out>& out);
  // Answers `seq` if every key it waits for exists; true when answered.
  // Amortized O(1) per write of a key it waits for, plus one pass over its
  // keys when they all seem present (a DELETE may have taken one since).
  bool try_answer(uint64_t seq, std::vector<Out>& out);
  void unpark(uint64_t seq);
  std::string add(const protocol::Request& r, std::vector<Out>& out);
  std::string compare_set(protocol::Request& r, std::vector<Out>& out);
  std::string multi_get(const protocol::Request& r) const;
  std::string keys_with_prefix(const protocol::Request& r) const;

  std::unordered_map<std::string, std::string> m_data;
  size_t m_bytes = 0;  // keys and values held
  size_t m_max_bytes;
  size_t m_max_keys;
  std::map<uint64_t, Parked> m_parked;
  uint64_t m_next_seq = 0;
  std::unordered_map<std::string, std::set<uint64_t>> m_watchers;  // key -> parked requests
  std::set<std::pair<TimePoint, uint64_t>> m_deadlines;
  std::unordered_map<Client, ClientState> m_clients;
};

}  // namespace ddplaunch
