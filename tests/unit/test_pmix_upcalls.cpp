// The fence and direct modex families end to end without libpmix: the
// upcalls' table (pmix_upcall_module(), the C adapters libpmix calls on its
// thread) posts to a server made for tests, whose handle_upcalls() carries
// the calls out over the in-memory store, and libpmix's completion is a
// function of the test's. A required directive the host does not read is
// refused; PMIX_TIMEOUT bounds a fence. Compiled where the build has
// libpmix's headers.
#include <gtest/gtest.h>

#if DDPLAUNCH_HAVE_PMIX

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fake_store.hpp"
#include "mpi/fence.hpp"
#include "mpi/pmix_server.hpp"
#include "mpi/pmix_upcalls.hpp"

namespace ddplaunch {
namespace {

using namespace testing_store;
using namespace std::chrono_literals;

pmix_info_t flag(const char* key, bool value, bool required = false) {
  pmix_info_t info;
  std::memset(&info, 0, sizeof info);
  std::strncpy(info.key, key, PMIX_MAX_KEYLEN);
  info.value.type = PMIX_BOOL;
  info.value.data.flag = value;
  info.flags = required ? PMIX_INFO_REQD : 0;
  return info;
}

pmix_info_t integer(const char* key, int value, bool required = false) {
  pmix_info_t info = flag(key, false, required);
  info.value.type = PMIX_INT;
  info.value.data.integer = value;
  return info;
}

// What libpmix's completion was handed.
struct Completed {
  std::optional<pmix_status_t> status;
  std::string data;
};

void completion(pmix_status_t status, const char* data, size_t ndata, void* cbdata,
                pmix_release_cbfunc_t release, void* release_data) {
  auto* c = static_cast<Completed*>(cbdata);
  c->status = status;
  c->data.assign(data != nullptr ? data : "", data != nullptr ? ndata : 0);
  if (release != nullptr) {
    release(release_data);
  }
}

// Two nodes of one rank each: node 0's server made for tests, node 1 a
// FenceExchange of its own on the same store.
struct TwoNodes {
  FakeClock clock;
  FakeStore store{clock};
  FakeConnection conn0{store};
  FakeConnection conn1{store};
  FenceExchange node1{conn1};
  PmixJob job;
  std::unique_ptr<PmixServer> server;
  TwoNodes() {
    job.nspace = "ddplaunch.test.0.0";
    job.node_rank = 0;
    job.world_size = 2;
    job.first_rank = {0, 1};
    job.nproc = {1, 1};
    job.hosts = {"a", "b"};
    server = PmixServer::for_tests(job);
    server->attach_store(&conn0);
  }
  ~TwoNodes() { server->attach_store(nullptr); }
  pmix_proc_t everyone() const {
    pmix_proc_t p;
    std::memset(&p, 0, sizeof p);
    std::strncpy(p.nspace, job.nspace.c_str(), PMIX_MAX_NSLEN);
    p.rank = PMIX_RANK_WILDCARD;
    return p;
  }
  pmix_status_t fence(std::vector<pmix_info_t> info, std::string data, Completed& done) {
    const pmix_proc_t procs[] = {everyone()};
    return pmix_upcall_module()->fence_nb(procs, 1, info.data(), info.size(), data.data(),
                                          data.size(), completion, &done);
  }
  void settle() {
    server->handle_upcalls();
    for (bool moved = true; moved;) {
      moved = false;
      for (FakeConnection* c : {&conn0, &conn1}) {
        while (c->deliver_one()) {
          moved = true;
        }
      }
    }
  }
};

TEST(PmixUpcalls, AFenceAcrossNodesHandsLibpmixEveryNodesDataInNodeOrder) {
  TwoNodes t;
  ASSERT_TRUE(t.server);
  Completed done;
  ASSERT_EQ(t.fence({flag(PMIX_COLLECT_DATA, true), integer(PMIX_TIMEOUT, 30)}, "A", done),
            PMIX_SUCCESS);
  t.settle();
  EXPECT_FALSE(done.status) << "node 1 is not in yet";
  t.node1.enter(t.job.nspace, "all", {0, 1}, 1, "B", [](FenceExchange::Outcome, std::string) {});
  t.settle();
  ASSERT_TRUE(done.status);
  EXPECT_EQ(*done.status, PMIX_SUCCESS);
  EXPECT_EQ(done.data, "AB");
}

TEST(PmixUpcalls, AFenceWhoseTimeoutPassesFailsWithPmixErrTimeout) {
  TwoNodes t;
  ASSERT_TRUE(t.server);
  Completed done;
  ASSERT_EQ(t.fence({flag(PMIX_COLLECT_DATA, true), integer(PMIX_TIMEOUT, 2, true)}, "A", done),
            PMIX_SUCCESS)
      << "a required PMIX_TIMEOUT is honoured, not refused";
  t.settle();
  t.clock.t += 1s;
  t.store.route(t.store.core.expire(t.clock.t));
  t.settle();
  EXPECT_FALSE(done.status) << "not yet: 2 s";
  t.clock.t += 1s;
  t.store.route(t.store.core.expire(t.clock.t));
  t.settle();
  ASSERT_TRUE(done.status) << "node 1 never came";
  EXPECT_EQ(*done.status, PMIX_ERR_TIMEOUT);
}

TEST(PmixUpcalls, ARequiredDirectiveNothingReadsIsRefusedAndAnOptionalOneIgnored) {
  TwoNodes t;
  ASSERT_TRUE(t.server);
  Completed refused;
  EXPECT_EQ(t.fence({integer(PMIX_LOCAL_COLLECTIVE_STATUS, PMIX_SUCCESS, true)}, "", refused),
            PMIX_ERR_NOT_SUPPORTED);
  Completed ignored;
  EXPECT_EQ(t.fence({integer(PMIX_LOCAL_COLLECTIVE_STATUS, PMIX_SUCCESS)}, "", ignored),
            PMIX_SUCCESS);
  // A direct modex's PMIX_REQUIRED_KEY: the request is for the rank's whole
  // data, so a required key is refused; its PMIX_TIMEOUT is read.
  pmix_proc_t rank1 = t.everyone();
  rank1.rank = 1;
  pmix_info_t key;
  std::memset(&key, 0, sizeof key);
  std::strncpy(key.key, PMIX_REQUIRED_KEY, PMIX_MAX_KEYLEN);
  key.value.type = PMIX_STRING;
  key.flags = PMIX_INFO_REQD;
  Completed modex;
  EXPECT_EQ(pmix_upcall_module()->direct_modex(&rank1, &key, 1, completion, &modex),
            PMIX_ERR_NOT_SUPPORTED);
  EXPECT_FALSE(modex.status);
}

}  // namespace
}  // namespace ddplaunch

#endif
