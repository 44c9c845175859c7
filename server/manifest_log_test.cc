#include "server/manifest_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace stagger::server {
namespace {

pb::ShardManifest Manifest(const std::string& job, int64_t step) {
  pb::ShardManifest m;
  m.set_job(job);
  m.set_step(step);
  m.set_world_size(1);
  m.set_chunk_size(4096);
  return m;
}

class ManifestLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stagger-mlog-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(ManifestLogTest, AppendsRewritesAndStopsAtATornTail) {
  ManifestLog log(dir_.string());
  for (int64_t s = 1; s <= 3; ++s)
    ASSERT_TRUE(log.Append(Manifest("j", s)).ok());
  ASSERT_TRUE(log.Append(Manifest("k", 9)).ok());
  auto c = ManifestLog::Read(log.PathOf("j"));
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->manifests.size(), 3u);
  EXPECT_EQ(c->manifests[2].step(), 3);
  EXPECT_EQ(c->ignored_bytes, 0u);

  // A crash during the third append: its tail is cut off.
  const auto size = std::filesystem::file_size(log.PathOf("j"));
  std::filesystem::resize_file(log.PathOf("j"), size - 3);
  c = ManifestLog::Read(log.PathOf("j"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->manifests.size(), 2u);
  EXPECT_GT(c->ignored_bytes, 0u);

  // After a gc: exactly the manifests kept.
  ASSERT_TRUE(log.Rewrite("j", {Manifest("j", 3)}).ok());
  c = ManifestLog::Read(log.PathOf("j"));
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->manifests.size(), 1u);
  EXPECT_EQ(c->manifests[0].step(), 3);
  EXPECT_FALSE(std::filesystem::exists(log.PathOf("j") + ".tmp"));
  // Other jobs' logs are their own; a job without one reads empty.
  EXPECT_EQ(ManifestLog::Read(log.PathOf("k"))->manifests.size(), 1u);
  EXPECT_TRUE(ManifestLog::Read(log.PathOf("none"))->manifests.empty());
}

}  // namespace
}  // namespace stagger::server
