// The pmix_info_t arrays: what InfoList builds for libpmix, and how the
// upcalls read the ones libpmix hands them (a flag as PMIx defines it, a
// timeout, a required directive the host does not know). Compiled where the
// build has libpmix's headers.
#include <gtest/gtest.h>

#if DDPLAUNCH_HAVE_PMIX

#include <string>

#include "mpi/pmix_info.hpp"

namespace ddplaunch {
namespace {

pmix_info_t entry(const char* key, pmix_data_type_t type, bool required = false) {
  pmix_info_t info;
  std::memset(&info, 0, sizeof info);
  std::strncpy(info.key, key, PMIX_MAX_KEYLEN);
  info.value.type = type;
  info.flags = required ? PMIX_INFO_REQD : 0;
  return info;
}

TEST(InfoList, EachEntryKeepsItsKeyTypeAndValueAndOwnsItsStrings) {
  InfoList list;
  EXPECT_EQ(list.data(), nullptr);
  std::string dir = "/tmp/job";
  list.str(PMIX_SERVER_TMPDIR, dir);
  dir = "changed";  // the list holds its own copy
  list.u32(PMIX_UNIV_SIZE, 8);
  list.flag(PMIX_SERVER_SHARE_TOPOLOGY, true);
  list.rank(PMIX_SERVER_RANK, 42);
  for (int i = 0; i < 100; ++i) {
    list.str(PMIX_NSPACE,
             "ns" + std::to_string(i));  // strings added later do not move earlier ones
  }
  ASSERT_EQ(list.size(), 104U);
  const pmix_info_t* info = list.data();
  EXPECT_STREQ(info[0].key, PMIX_SERVER_TMPDIR);
  EXPECT_EQ(info[0].value.type, PMIX_STRING);
  EXPECT_STREQ(info[0].value.data.string, "/tmp/job");
  EXPECT_EQ(info[1].value.type, PMIX_UINT32);
  EXPECT_EQ(info[1].value.data.uint32, 8U);
  EXPECT_EQ(info[2].value.type, PMIX_BOOL);
  EXPECT_TRUE(info[2].value.data.flag);
  EXPECT_EQ(info[3].value.type, PMIX_PROC_RANK);
  EXPECT_EQ(info[3].value.data.rank, 42U);
  EXPECT_STREQ(info[103].value.data.string, "ns99");
  EXPECT_EQ(info[0].flags, 0U);  // nothing is marked required
}

TEST(PmixInfo, AFlagIsTrueAsPmixReadsOne) {
  pmix_info_t undef = entry(PMIX_COLLECT_DATA, PMIX_UNDEF);
  EXPECT_TRUE(info_true(undef));  // a key without a value is set
  pmix_info_t yes = entry(PMIX_COLLECT_DATA, PMIX_BOOL);
  yes.value.data.flag = true;
  EXPECT_TRUE(info_true(yes));
  pmix_info_t no = entry(PMIX_COLLECT_DATA, PMIX_BOOL);
  EXPECT_FALSE(info_true(no));
  pmix_info_t number = entry(PMIX_COLLECT_DATA, PMIX_INT);
  number.value.data.integer = 1;
  EXPECT_FALSE(info_true(number));  // not a boolean: not true
}

TEST(PmixInfo, ATimeoutIsAPositiveWholeNumberOfSeconds) {
  pmix_info_t t = entry(PMIX_TIMEOUT, PMIX_INT);
  t.value.data.integer = 30;
  EXPECT_EQ(info_seconds(t), std::chrono::seconds(30));
  t.value.data.integer = 0;
  EXPECT_FALSE(info_seconds(t));  // PMIx's "none"
  t.value.data.integer = -5;
  EXPECT_FALSE(info_seconds(t));
  pmix_info_t u = entry(PMIX_TIMEOUT, PMIX_UINT32);
  u.value.data.uint32 = 7;
  EXPECT_EQ(info_seconds(u), std::chrono::seconds(7));
  pmix_info_t s = entry(PMIX_TIMEOUT, PMIX_STRING);
  EXPECT_FALSE(info_seconds(s));
}

TEST(PmixInfo, OnlyARequiredDirectiveThatIsNotKnownIsNamed) {
  pmix_info_t info[] = {entry(PMIX_COLLECT_DATA, PMIX_BOOL, true),
                        entry("pmix.some.hint", PMIX_BOOL, false),
                        entry(PMIX_TIMEOUT, PMIX_INT, true)};
  EXPECT_EQ(first_unknown_required(info, 3, {PMIX_COLLECT_DATA, PMIX_TIMEOUT}), "");
  EXPECT_EQ(first_unknown_required(info, 3, {PMIX_COLLECT_DATA}), PMIX_TIMEOUT);
  info[1].flags = PMIX_INFO_REQD;  // now the hint is required too
  EXPECT_EQ(first_unknown_required(info, 3, {PMIX_COLLECT_DATA, PMIX_TIMEOUT}), "pmix.some.hint");
  EXPECT_EQ(first_unknown_required(nullptr, 0, {}), "");
  // A key of the full PMIX_MAX_KEYLEN, without its NUL, is read within bounds.
  pmix_info_t longest = entry("x", PMIX_BOOL, true);
  std::memset(longest.key, 'k', sizeof longest.key);
  EXPECT_EQ(first_unknown_required(&longest, 1, {}).size(), static_cast<size_t>(PMIX_MAX_KEYLEN));
}

TEST(PmixInfo, AProcNamesItsNamespaceAndRank) {
  const pmix_proc_t p = make_proc("job-1", 5);
  EXPECT_STREQ(p.nspace, "job-1");
  EXPECT_EQ(p.rank, 5U);
}

}  // namespace
}  // namespace ddplaunch

#endif
