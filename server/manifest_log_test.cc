#include "server/manifest_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "server/storage/fault_injection_file_system.h"
#include "server/storage/posix_file_system.h"

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
  PosixFileSystem fs;
  ManifestLog log(dir_.string(), &fs);
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

std::vector<int64_t> Steps(const std::string& path, uint64_t* ignored) {
  auto c = ManifestLog::Read(path);
  EXPECT_TRUE(c.ok()) << c.status();
  std::vector<int64_t> steps;
  if (!c.ok()) return steps;
  for (const pb::ShardManifest& m : c->manifests) steps.push_back(m.step());
  *ignored = c->ignored_bytes;
  return steps;
}

// A crash's torn tail is cut off by the next run's first append, and an
// append that failed part way (the disk filled) is overwritten by the next:
// no entry is ever written behind bytes that stop the reader.
TEST_F(ManifestLogTest, NoEntryIsWrittenBehindATornOne) {
  PosixFileSystem base;
  FaultInjectionFileSystem fs(&base);
  std::string path;
  {
    ManifestLog log(dir_.string(), &fs);
    path = log.PathOf("j");
    ASSERT_TRUE(log.Append(Manifest("j", 1)).ok());
    ASSERT_TRUE(log.Append(Manifest("j", 2)).ok());
  }
  const auto intact = std::filesystem::file_size(path);
  {
    std::ofstream torn(path, std::ios::app | std::ios::binary);
    torn.write("\x40\0\0\0junk", 8);  // an entry of 64 bytes, cut short
  }
  uint64_t ignored = 0;
  EXPECT_EQ(Steps(path, &ignored), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ignored, 8u);

  ManifestLog log(dir_.string(), &fs);  // the next run
  ASSERT_TRUE(log.Append(Manifest("j", 3)).ok());
  EXPECT_EQ(Steps(path, &ignored), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ignored, 0u);

  const auto before = std::filesystem::file_size(path);
  EXPECT_GT(before, intact);
  fs.SetNoSpaceAfter(5);
  EXPECT_EQ(log.Append(Manifest("j", 4)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::filesystem::file_size(path), before + 5);
  fs.ClearNoSpace();
  ASSERT_TRUE(log.Append(Manifest("j", 5)).ok());
  EXPECT_EQ(Steps(path, &ignored), (std::vector<int64_t>{1, 2, 3, 5}));
  EXPECT_EQ(ignored, 0u);
}

// Rewrite replaces the log through a synced temporary file: a power loss
// right after it keeps the new contents, and appends go after them.
TEST_F(ManifestLogTest, ARewriteSurvivesAPowerLossAndTakesAppends) {
  PosixFileSystem base;
  FaultInjectionFileSystem fs(&base);
  ManifestLog log(dir_.string(), &fs);
  for (int64_t s = 1; s <= 3; ++s) {
    ASSERT_TRUE(log.Append(Manifest("j", s)).ok());
  }
  ASSERT_TRUE(log.Rewrite("j", {Manifest("j", 3)}).ok());
  ASSERT_TRUE(log.Append(Manifest("j", 4)).ok());
  ASSERT_TRUE(fs.DropUnsyncedData().ok());
  uint64_t ignored = 0;
  EXPECT_EQ(Steps(log.PathOf("j"), &ignored), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ignored, 0u);
  EXPECT_FALSE(std::filesystem::exists(log.PathOf("j") + ".tmp"));
  // A crashed disk refuses the rewrite; the log stays as it was.
  fs.SetActive(false);
  EXPECT_EQ(log.Rewrite("j", {}).code(), absl::StatusCode::kUnavailable);
  fs.SetActive(true);
  EXPECT_EQ(Steps(log.PathOf("j"), &ignored), (std::vector<int64_t>{3, 4}));
}

}  // namespace
}  // namespace stagger::server
