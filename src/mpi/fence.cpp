#include "mpi/fence.hpp"

#include <algorithm>
#include <memory>

#include "config/integer.hpp"
#include "log.hpp"
#include "mpi/pmix_job.hpp"
#include "store/protocol.hpp"

namespace ddplaunch {

namespace {

// The done key: 'p' and the number of parts the data is in; anything else
// ("abandoned", "missing", "too large") fails the fence.
constexpr char k_fence_parts = 'p';
constexpr std::string_view k_fence_abandoned = "abandoned";
// As many parts as one MULTI_GET reply holds.
constexpr int k_max_fence_parts =
    static_cast<int>(protocol::k_max_reply / protocol::k_max_value) - 1;

std::vector<std::string> fence_part_keys(const FenceKeys& keys, int parts) {
  std::vector<std::string> out;
  for (int i = 0; i < parts; ++i) {
    out.push_back(keys.done + "/" + std::to_string(i));
  }
  return out;
}

}  // namespace

void FenceExchange::enter(const std::string& nspace, const std::string& signature,
                          const std::vector<int>& nodes, int self, std::string data, Done done,
                          StoreConnection::Duration timeout) {
  const long seq = m_seq[nspace + "/" + signature]++;
  if (data.size() > protocol::k_max_value) {
    // One record per node: more than the store holds in a value fails this
    // fence (the ranks' MPI_Init says so), not the job's store connection.
    log::warn(
        "a PMIx fence's data from this node is {} bytes, over the store's {} per value: "
        "the fence fails",
        data.size(), protocol::k_max_value);
    done(Outcome::k_failed, {});
    return;
  }
  auto keys = std::make_shared<FenceKeys>(fence_keys(nspace, signature, seq, nodes));
  const auto me = static_cast<size_t>(std::find(nodes.begin(), nodes.end(), self) - nodes.begin());
  const auto total = static_cast<int64_t>(nodes.size());
  StoreConnection& conn = m_connection;
  m_waiting.insert(keys->done);
  auto finish = [this, &conn, keys, me, total,
                 done = std::move(done)](std::optional<std::string> said) {
    m_waiting.erase(keys->done);
    if (!said) {
      // Its timeout passed: this node's record and count stay, as a late
      // fence may still complete for the others.
      done(Outcome::k_timed_out, {});
      return;
    }
    if (said->empty() || *said == k_fence_abandoned) {
      done(Outcome::k_failed, {});  // abandon(): the round ended first; its keys go with the round
      return;
    }
    const auto parts =
        (*said)[0] == k_fence_parts
            ? parse_integer_in(std::string_view(*said).substr(1), 1, k_max_fence_parts)
            : std::nullopt;
    if (!parts) {
      done(Outcome::k_failed, {});  // "missing" or "too large": the fence failed everywhere
      release(conn, keys, me, total, 0);
      return;
    }
    const int count = static_cast<int>(*parts);
    conn.multi_get(fence_part_keys(*keys, count), [&conn, keys, me, total, count, done](
                                                      std::vector<std::optional<std::string>> got) {
      std::string all;
      bool ok = true;
      for (const auto& part : got) {
        ok = ok && part.has_value();
        all += part.value_or("");
      }
      done(ok ? Outcome::k_ok : Outcome::k_failed, ok ? std::move(all) : std::string());
      release(conn, keys, me, total, count);
    });
  };
  // The record first: whoever sees the count complete knows every record is
  // in, and gathers them once for everyone.
  conn.set(keys->records.at(me), data,
           [&conn, keys, total, timeout, finish = std::move(finish)]() mutable {
             conn.add(keys->counter, 1, [&conn, keys, total](int64_t arrived) {
               if (arrived == total) {
                 gather(conn, keys);
               }
             });
             conn.get(keys->done, timeout, std::move(finish));
           });
}

// A node done with a fence's result deletes its own record (the gatherer read
// every record before it set done) and counts itself out; the last node out
// deletes what is shared: the counters, the parts and done. Node 0's store then
// holds no key of a completed fence, however many fences a job makes.
void FenceExchange::release(StoreConnection& conn, const std::shared_ptr<FenceKeys>& keys,
                            size_t me, int64_t total, int parts) {
  conn.erase(keys->records.at(me), [] {});
  conn.add(keys->read, 1, [&conn, keys, total, parts](int64_t out) {
    if (out != total) {
      return;
    }
    for (const auto& key : fence_part_keys(*keys, parts)) {
      conn.erase(key, [] {});
    }
    conn.erase(keys->counter, [] {});
    conn.erase(keys->done, [] {});
    conn.erase(keys->read, [] {});
  });
}

// The last node to arrive reads every record (the N records the store
// serves per fence) and publishes their concatenation in node order, in
// parts of at most one value that the done key counts. Each node then reads
// those parts (one, mostly) instead of N records: about 3N values per fence
// at the store, not N * N. The done key stays small on purpose: N parked
// GETs woken with the data itself would make the store encode every copy
// in one burst, where N requests for it are served as they come, the
// store's work overlapping the nodes' (bench/fence.py, 1,024 nodes of 400 B
// on 2 CPUs: 4.7 s; 6.1 s when every node read every record; 7.6 s with the
// data in the done key).
void FenceExchange::gather(StoreConnection& conn, const std::shared_ptr<FenceKeys>& keys) {
  conn.multi_get(keys->records, [&conn, keys](std::vector<std::optional<std::string>> records) {
    std::string all;
    for (const auto& r : records) {
      if (!r) {
        conn.set(keys->done, "missing", [] {});  // the store lost data: every node fails the fence
        return;
      }
      all += *r;
    }
    // One part at least: a fence without data (a barrier) has one, empty.
    const size_t parts =
        std::max<size_t>(1, (all.size() + protocol::k_max_value - 1) / protocol::k_max_value);
    if (parts > static_cast<size_t>(k_max_fence_parts)) {
      log::warn(
          "a PMIx fence's data is {} bytes, over the {} a fence can carry: the fence fails; "
          "fewer ranks per fence, or Open MPI's direct modex (OMPI_MCA_pmix_base_async_modex=1), "
          "keep it smaller",
          all.size(), static_cast<size_t>(k_max_fence_parts) * protocol::k_max_value);
      conn.set(keys->done, "too large", [] {});
      return;
    }
    const auto part_keys = fence_part_keys(*keys, static_cast<int>(parts));
    for (size_t i = 0; i < parts; ++i) {
      conn.set(part_keys[i], all.substr(i * protocol::k_max_value, protocol::k_max_value), [] {});
    }
    // After the parts: requests on one connection are served in order.
    conn.set(keys->done, k_fence_parts + std::to_string(parts), [] {});
  });
}

void FenceExchange::abandon() {
  for (const auto& key : m_waiting) {
    m_connection.set(key, std::string(k_fence_abandoned), [] {});
  }
  m_waiting.clear();
}

}  // namespace ddplaunch
