#include "mpi/dmodex.hpp"

#include <chrono>
#include <limits>

#include "config/integer.hpp"
#include "log.hpp"

namespace ddplaunch {

namespace {

std::string queue_key(const std::string& nspace, int node, const std::string& slot) {
  return "mpi/" + nspace + "/dmodex/" + std::to_string(node) + "/" + slot;
}

}  // namespace

struct DirectModex::Serving {
  std::string nspace;
  int node = 0;  // whose queue
  Lookup lookup;
  long next = 1;  // the slot watched
  bool stopped = false;
};

DirectModex::~DirectModex() {
  if (m_serving) {
    m_serving->stopped = true;
  }
}

void DirectModex::request(const std::string& nspace, int self, int target, int rank,
                          StoreConnection::Duration timeout, Reply reply) {
  const std::string reply_key =
      "mpi/" + nspace + "/dmodex/reply/" + std::to_string(self) + "/" + std::to_string(m_replies++);
  StoreConnection& conn = m_connection;
  conn.add(
      queue_key(nspace, target, "count"), 1,
      [&conn, nspace, target, rank, timeout, reply_key, reply = std::move(reply)](int64_t slot) {
        conn.set(queue_key(nspace, target, std::to_string(slot)),
                 std::to_string(rank) + " " + reply_key, [] {});
        conn.get(reply_key, timeout,
                 [reply, rank, target, timeout](std::optional<std::string> answer) {
                   if (!answer) {
                     log::warn(
                         "rank {}'s PMIx data was asked of node {}, which did not answer "
                         "within {} s: the asking rank's PMIx_Get fails (did rank {} reach "
                         "MPI_Init? PMIX_TIMEOUT sets this wait)",
                         rank, target,
                         std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), rank);
                   }
                   // "1" and the data, or "0": no data for that rank.
                   const bool ok = answer && !answer->empty() && answer->front() == '1';
                   reply(ok, ok ? answer->substr(1) : std::string());
                 });
      });
}

void DirectModex::serve(const std::string& nspace, int self, Lookup lookup) {
  if (m_serving && m_serving->nspace == nspace && m_serving->node == self) {
    return;
  }
  stop_serving();
  m_serving = std::make_shared<Serving>();
  m_serving->nspace = nspace;
  m_serving->node = self;
  m_serving->lookup = std::move(lookup);
  watch(m_serving);
}

void DirectModex::stop_serving() {
  if (!m_serving) {
    return;
  }
  m_serving->stopped = true;
  // The parked GET of the next slot ends (a request there later is never
  // answered: its namespace is over).
  m_connection.set(queue_key(m_serving->nspace, m_serving->node, std::to_string(m_serving->next)),
                   "end", [] {});
  m_serving.reset();
}

void DirectModex::watch(const std::shared_ptr<Serving>& serving) {
  StoreConnection& conn = m_connection;
  const std::string key = queue_key(serving->nspace, serving->node, std::to_string(serving->next));
  conn.get(key, StoreConnection::Duration(0),
           [this, &conn, serving](std::optional<std::string> entry) {
             if (serving->stopped || !entry) {
               return;
             }
             ++serving->next;
             // "RANK REPLY_KEY": a rank that is not one is looked up as
             // none (-1), and the reply says so.
             const auto space = entry->find(' ');
             const int rank =
                 static_cast<int>(parse_integer_in(std::string_view(*entry).substr(0, space), 0,
                                                   std::numeric_limits<int>::max())
                                      .value_or(-1));
             if (space != std::string::npos) {
               const std::string reply_key = entry->substr(space + 1);
               serving->lookup(rank, [&conn, reply_key](bool ok, std::string data) {
                 conn.set(reply_key, ok ? "1" + data : "0", [] {});
               });
             }
             watch(serving);
           });
}

}  // namespace ddplaunch
