#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "mpi/pmix_env_cache.hpp"
#include "scratch_dir.hpp"

namespace ddplaunch {
namespace {

namespace fs = std::filesystem;

const PmixRunNames k_run{"ddplaunch-server.4242;tcp4://127.0.0.1:40001", "ddplaunch.job.0.0",
                         "/tmp/ddplaunch-job-abc", "4242"};

// What libpmix 4.2's setup_fork gives a client (hash store).
EnvVars setup_fork_env(const PmixRunNames& run) {
  return {{"PMIX_NAMESPACE", run.nspace}, {"PMIX_SERVER_URI41", run.uri},
          {"PMIX_SERVER_URI4", run.uri},  {"PMIX_SECURITY_MODE", "native"},
          {"PMIX_GDS_MODULE", "hash"},    {"PMIX_SERVER_TMPDIR", run.tmpdir},
          {"PMIX_HOSTNAME", "node7"},     {"PMIX_VERSION", "4.2.2rc2"}};
}

TEST(PmixEnvCache, ATemplateGivesAnotherRunItsOwnNames) {
  const auto tmpl = pmix_env_template(setup_fork_env(k_run), k_run);
  ASSERT_TRUE(tmpl);
  for (const auto& [name, value] : *tmpl) {
    EXPECT_EQ(value.find("4242"), std::string::npos) << name;
    EXPECT_EQ(value.find("abc"), std::string::npos) << name;
  }
  const PmixRunNames next{"ddplaunch-server.77;tcp4://127.0.0.1:51000", "ddplaunch.job.1.0",
                          "/tmp/ddplaunch-job-xyz", "77"};
  EXPECT_EQ(pmix_env_for_run(*tmpl, next), setup_fork_env(next));
}

TEST(PmixEnvCache, WhatTheServerMakesAsItStartsIsNotKept) {
  // ds21's shared-memory store: a worker started before its server would
  // look for these files before they exist.
  EnvVars env = setup_fork_env(k_run);
  env.emplace_back("PMIX_DSTORE_21_BASE_PATH", k_run.tmpdir + "/pmix_dstor_ds21_4242");
  EXPECT_FALSE(pmix_env_template(env, k_run));
  // The same digits inside another number are not the pid.
  env.back().second = k_run.tmpdir + "/store_142421";
  EXPECT_TRUE(pmix_env_template(env, k_run));
}

TEST(PmixEnvCache, ValuesThatCannotBeWrittenBackAreNotKept) {
  EnvVars env = setup_fork_env(k_run);
  env.emplace_back("PMIX_ODD", "two\nlines");
  EXPECT_FALSE(pmix_env_template(env, k_run));
  env.back().second = "@@URI@@";  // a placeholder's own spelling
  EXPECT_FALSE(pmix_env_template(env, k_run));
}

TEST(PmixEnvCache, AKeptTemplateIsReadBackForTheSameLibraryAndSettings) {
  ScratchDir dir("pmix-env-cache-test");
  const std::string library = dir / "libpmix.so.2";
  std::ofstream(library) << "version one";
  const auto tmpl = pmix_env_template(setup_fork_env(k_run), k_run);
  ASSERT_TRUE(tmpl);
  const std::string path = dir / "cache.env";
  const std::string fingerprint = pmix_env_fingerprint({{"PMIX_MCA_gds", "hash"}});
  ASSERT_TRUE(write_pmix_env_cache(path, fingerprint, library, *tmpl));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(read_pmix_env_cache(path, fingerprint), tmpl);

  // Other PMIx settings, or another library in the same place: learnt again.
  EXPECT_FALSE(read_pmix_env_cache(path, pmix_env_fingerprint({{"PMIX_MCA_gds", "ds21"}})));
  std::ofstream(library) << "version two, a longer file";
  EXPECT_FALSE(read_pmix_env_cache(path, fingerprint));
  fs::remove(library);
  EXPECT_FALSE(read_pmix_env_cache(path, fingerprint));
}

TEST(PmixEnvCache, ADamagedCacheIsIgnored) {
  ScratchDir dir("pmix-env-cache-test");
  const std::string library = dir / "libpmix.so.2";
  std::ofstream(library) << "lib";
  const std::string path = dir / "cache.env";
  const std::string fingerprint = pmix_env_fingerprint({});
  ASSERT_TRUE(write_pmix_env_cache(path, fingerprint, library, {{"PMIX_VERSION", "4.2"}}));
  ASSERT_TRUE(read_pmix_env_cache(path, fingerprint));
  std::ofstream(path, std::ios::app) << "no equals sign\n";
  EXPECT_FALSE(read_pmix_env_cache(path, fingerprint));
  std::ofstream(path) << "garbage";
  EXPECT_FALSE(read_pmix_env_cache(path, fingerprint));
  ::chmod(path.c_str(), 0666);  // writable by others: never trusted
  EXPECT_FALSE(read_pmix_env_cache(path, fingerprint));
}

TEST(PmixEnvCache, TheLazyStartCanBeTurnedOff) {
  EXPECT_TRUE(pmix_lazy_enabled({}));
  EXPECT_TRUE(pmix_lazy_enabled({{"DDPLAUNCH_PMIX_LAZY", "1"}}));
  EXPECT_FALSE(pmix_lazy_enabled({{"DDPLAUNCH_PMIX_LAZY", "0"}}));
  EXPECT_FALSE(pmix_lazy_enabled({{"DDPLAUNCH_PMIX_LAZY", "off"}}));
}

}  // namespace
}  // namespace ddplaunch
