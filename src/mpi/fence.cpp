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
                          const std::vector<int>& nodes, int self, std::string data, Done done) {
  const long seq = m_seq[nspace + "/" + signature]++;
  if (data.size() > protocol::k_max_value) {
    // One record per node: more than the store holds in a value fails this
    // fence (the ranks' MPI_Init says so), not the job's store connection.
    log::warn(
        "a PMIx fence's data from this node is {} bytes, over the store's {} per value: "
        "the fence fails",
        data.size(), protocol::k_max_value);
    done(false, {});
    return;
  }
  auto keys = std::make_shared<FenceKeys>(fence_keys(nspace, signature, seq, nodes));
  const auto me = std::find(nodes.begin(), nodes.end(), self) - nodes.begin();
  const auto total = static_cast<int64_t>(nodes.size());
  StoreConnection& conn = m_connection;
  m_waiting.insert(keys->done);
  auto finish = [this, &conn, keys, done = std::move(done)](std::optional<std::string> said) {
    m_waiting.erase(keys->done);
    if (!said || said->empty() || (*said)[0] != k_fence_parts) {
      done(false, {});  // abandon(): the round ended first
      return;
    }
    const auto parts = parse_integer_in(std::string_view(*said).substr(1), 1, k_max_fence_parts);
    if (!parts) {
      done(false, {});
      return;
    }
    conn.multi_get(fence_part_keys(*keys, static_cast<int>(*parts)),
                   [done](std::vector<std::optional<std::string>> got) {
                     std::string all;
                     for (const auto& part : got) {
                       if (!part) {
                         done(false, {});
                         return;
                       }
                       all += *part;
                     }
                     done(true, std::move(all));
                   });
  };
  // The record first: whoever sees the count complete knows every record is
  // in, and gathers them once for everyone.
  conn.set(keys->records.at(static_cast<size_t>(me)), data,
           [&conn, keys, total, finish = std::move(finish)]() mutable {
             conn.add(keys->counter, 1, [&conn, keys, total](int64_t arrived) {
               if (arrived == total) {
                 gather(conn, keys);
               }
             });
             conn.get(keys->done, StoreConnection::Duration(0), std::move(finish));
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
    m_connection.set(key, "abandoned", [] {});
  }
  m_waiting.clear();
}

}  // namespace ddplaunch
