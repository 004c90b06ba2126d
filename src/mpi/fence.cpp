#include "mpi/fence.hpp"

#include <algorithm>
#include <memory>

#include "log.hpp"
#include "mpi/pmix_job.hpp"
#include "store/protocol.hpp"

namespace ddplaunch {

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
  auto finish = [this, &conn, keys, done = std::move(done)](std::optional<std::string> flag) {
    m_waiting.erase(keys->done);
    if (flag != "1") {
      done(false, {});  // abandon(): the round ended first
      return;
    }
    conn.multi_get(keys->records, [done](std::vector<std::optional<std::string>> records) {
      std::string all;
      for (const auto& r : records) {
        if (!r) {
          done(false, {});
          return;
        }
        all += *r;
      }
      done(true, std::move(all));
    });
  };
  // The record first: whoever sees the count complete knows every record is in.
  conn.set(keys->records.at(static_cast<size_t>(me)), data,
           [&conn, keys, total, finish = std::move(finish)]() mutable {
             conn.add(keys->counter, 1, [&conn, keys, total](int64_t arrived) {
               if (arrived == total) {
                 conn.set(keys->done, "1", [] {});
               }
             });
             conn.get(keys->done, StoreConnection::Duration(0), std::move(finish));
           });
}

void FenceExchange::abandon() {
  for (const auto& key : m_waiting) {
    m_connection.set(key, "abandoned", [] {});
  }
  m_waiting.clear();
}

}  // namespace ddplaunch
