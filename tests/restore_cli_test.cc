// `stagger restore` as an operator runs it after a failure: interrupted by
// SIGINT or SIGTERM in the middle of a file it leaves no ".partial" file,
// exits 130 or 143 and says what was left complete; local file-system
// errors carry their own codes and name the path. Real processes.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "format/crc32c.h"
#include "gtest/gtest.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using testutil::BinDir;
using testutil::RunProcess;
using testutil::RunResult;

std::string Cli() { return BinDir() + "/stagger"; }

// Saves step 1 of job "r": two ranks of `bytes` each.
void SaveTwoRanks(const std::string& servers, size_t bytes) {
  std::vector<std::unique_ptr<Checkpointer>> cks;
  std::vector<std::vector<char>> data(2, std::vector<char>(bytes));
  std::vector<SaveHandle> handles;
  for (uint32_t r = 0; r < 2; ++r) {
    CheckpointerOptions o;
    o.servers = servers;
    o.job = "r";
    o.rank = r;
    o.world_size = 2;
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    testutil::FillPattern(data[r], testutil::WeightSeed(r, 1));
    ASSERT_TRUE(
        (*ck)->Register({"w", "U8", {int64_t(bytes)}, data[r].data()}).ok());
    auto h = (*ck)->Save(1);
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
    cks.push_back(std::move(*ck));
  }
  for (auto& h : handles) ASSERT_TRUE(h.Wait().ok()) << h.Wait();
}

std::vector<std::string> Partials(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".partial") out.push_back(e.path().string());
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class RestoreInterruptTest : public ::testing::TestWithParam<int> {};

TEST_P(RestoreInterruptTest, LeavesNoPartialFileAndSaysWhatIsComplete) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NO_FATAL_FAILURE(SaveTwoRanks((*server)->grpc(), 96 << 20));

  const std::string out = dir.path() + "/out";
  const std::string err = dir.path() + "/err";
  pid_t pid = testutil::Spawn(
      {"/bin/sh", "-c",
       "exec '" + Cli() + "' --server " + (*server)->grpc() +
           " restore --job r --step 1 --out '" + out + "' 2>'" + err + "'"});
  ASSERT_GT(pid, 0);
  // Interrupt while the first file is being written.
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Partials(out).empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_FALSE(Partials(out).empty()) << "restore never started writing";
  kill(pid, GetParam());
  EXPECT_EQ(testutil::WaitExit(pid), 128 + GetParam());
  EXPECT_TRUE(Partials(out).empty());
  const std::string said = ReadFile(err);
  EXPECT_NE(said.find(GetParam() == SIGINT ? "interrupted by SIGINT"
                                           : "interrupted by SIGTERM"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("; removed " + out + "/rank-0000"), std::string::npos)
      << said;
  EXPECT_NE(said.find(" of 2 files complete in " + out), std::string::npos)
      << said;
}

INSTANTIATE_TEST_SUITE_P(Signals, RestoreInterruptTest,
                         ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "Sigint" : "Sigterm";
                         });

TEST(RestoreErrorsTest, ANonEmptyDirectoryIsRefusedAndAManifestListsTheFiles) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NO_FATAL_FAILURE(SaveTwoRanks((*server)->grpc(), 1 << 20));
  const std::string s = (*server)->grpc();
  const std::string out = dir.path() + "/out";
  RunResult first =
      RunProcess({Cli(), "--server", s, "restore", "--job", "r", "--out", out});
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_NE(first.out.find("restored job 'r' step 1: 2 ranks, "),
            std::string::npos)
      << first.out;
  const std::string manifest = ReadFile(out + "/MANIFEST.json");
  EXPECT_NE(manifest.find("{\"job\":\"r\",\"step\":1,\"world_size\":2,"
                          "\"consolidated\":false"),
            std::string::npos)
      << manifest;
  for (const char* f : {"rank-00000.safetensors", "rank-00001.safetensors"}) {
    const std::string bytes = ReadFile(out + "/" + f);
    ASSERT_FALSE(bytes.empty()) << f;
    const std::string row = absl::StrFormat(
        "{\"file\":\"%s\",\"bytes\":%d,\"crc32c\":\"%08x\"}", f, bytes.size(),
        format::Crc32c(bytes.data(), bytes.size()));
    EXPECT_NE(manifest.find(row), std::string::npos) << row << "\n" << manifest;
  }
  // A second restore into it would mix files: refused, unless --force.
  RunResult again =
      RunProcess({Cli(), "--server", s, "restore", "--job", "r", "--out", out});
  EXPECT_EQ(again.exit_code, 1) << again.out;
  EXPECT_NE(again.out.find("FAILED_PRECONDITION: --out " + out +
                           " is not empty (3 entries"),
            std::string::npos)
      << again.out;
  EXPECT_NE(again.out.find("pass --force"), std::string::npos) << again.out;
  RunResult forced = RunProcess(
      {Cli(), "--server", s, "restore", "--job", "r", "--out", out, "--force"});
  EXPECT_EQ(forced.exit_code, 0) << forced.out;
}

TEST(RestoreErrorsTest, LocalFileSystemErrorsHaveTheirOwnCodes) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/data");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NO_FATAL_FAILURE(SaveTwoRanks((*server)->grpc(), 3 << 20));
  const std::string s = (*server)->grpc();

  const std::string file = dir.path() + "/a-file";
  std::ofstream(file) << "x";
  RunResult not_dir = RunProcess(
      {Cli(), "--server", s, "restore", "--job", "r", "--out", file});
  EXPECT_EQ(not_dir.exit_code, 1);
  EXPECT_NE(not_dir.out.find("FAILED_PRECONDITION: --out " + file +
                             " exists and is not a directory"),
            std::string::npos)
      << not_dir.out;

  RunResult under_file = RunProcess(
      {Cli(), "--server", s, "restore", "--job", "r", "--out", file + "/x"});
  EXPECT_EQ(under_file.exit_code, 1);
  EXPECT_NE(under_file.out.find("FAILED_PRECONDITION: cannot create --out " +
                                file + "/x"),
            std::string::npos)
      << under_file.out;

  // A full disk: a 4 MiB tmpfs for 6 MiB of ranks (needs the right to
  // mount, as root in CI has).
  const std::string small = dir.path() + "/small";
  std::filesystem::create_directories(small);
  if (mount("tmpfs", small.c_str(), "tmpfs", 0, "size=4m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here; the full-disk case is untried";
  }
  RunResult full = RunProcess(
      {Cli(), "--server", s, "restore", "--job", "r", "--out", small});
  EXPECT_EQ(full.exit_code, 1);
  EXPECT_NE(full.out.find("RESOURCE_EXHAUSTED: rank 1: reserve"),
            std::string::npos)
      << full.out;
  EXPECT_TRUE(Partials(small).empty());
  // The first rank fitted and is whole.
  EXPECT_TRUE(std::filesystem::exists(small + "/rank-00000.safetensors"));
  umount(small.c_str());
}

}  // namespace
}  // namespace stagger
