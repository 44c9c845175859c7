// stagger-server --rebuild-index: with its metadata (RocksDB) deleted, a
// server's data directory alone gives back every step it held (and none
// that a gc deleted), deltas included, bit-exactly.
#include <signal.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

TEST(RebuildIndexTest, TheSegmentsAndManifestLogsGiveEveryStepBack) {
  testutil::TempDir dir;
  const std::string data = dir.path() + "/data";
  auto server = testutil::ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->grpc();
  CheckpointerOptions o;
  o.servers = addr;
  o.job = "rb";
  o.chunk_size = 128 << 10;
  o.adaptive_codec = false;  // every changed chunk tries a delta
  std::vector<char> w(2 << 20);
  std::map<int64_t, std::vector<char>> saved;
  {
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    ASSERT_TRUE(
        (*ck)->Register({"w", "F32", {int64_t(w.size() / 4)}, w.data()}).ok());
    testutil::FillPattern(w, 1);
    for (int64_t step = 1; step <= 4; ++step) {
      // Each step changes a few bytes of some chunks: deltas and unchanged
      // chunks, not only whole ones.
      for (size_t i = step * 4096; i < w.size(); i += 300000) w[i] ^= 0x11;
      auto h = (*ck)->Save(step);
      ASSERT_TRUE(h.ok()) << h.status();
      ASSERT_TRUE(h->Wait().ok()) << h->Wait();
      saved[step] = w;
    }
  }
  // Not while a server runs on the directory, nor on one without segments.
  const std::string server_bin = testutil::BinDir() + "/stagger-server";
  testutil::RunResult busy =
      testutil::RunProcess({server_bin, "--data", data, "--rebuild-index"});
  EXPECT_EQ(busy.exit_code, 1) << busy.out;
  EXPECT_NE(busy.out.find("stop the server first"), std::string::npos)
      << busy.out;
  testutil::RunResult empty = testutil::RunProcess(
      {server_bin, "--data", dir.path() + "/none", "--rebuild-index"});
  EXPECT_EQ(empty.exit_code, 1) << empty.out;
  EXPECT_NE(empty.out.find("nothing to rebuild from"), std::string::npos)
      << empty.out;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/none"));

  const std::string cli = testutil::BinDir() + "/stagger";
  testutil::RunResult gc = testutil::RunProcess(
      {cli, "--server", addr, "gc", "--job", "rb", "--keep", "3"});
  ASSERT_EQ(gc.exit_code, 0) << gc.out;
  EXPECT_EQ((*server)->Stop(SIGTERM), 0);
  server->reset();

  std::filesystem::remove_all(data + "/meta");
  testutil::RunResult rebuilt =
      testutil::RunProcess({testutil::BinDir() + "/stagger-server", "--data",
                            data, "--rebuild-index"});
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("1 jobs"), std::string::npos) << rebuilt.out;
  EXPECT_NE(rebuilt.out.find("3 manifests (0 refused), 3 complete steps, 0 "
                             "chunks referenced but held elsewhere or lost"),
            std::string::npos)
      << rebuilt.out;

  server = testutil::ServerProcess::Start(data, {"--listen", addr});
  ASSERT_TRUE(server.ok()) << server.status();
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(
      (*ck)->Register({"w", "F32", {int64_t(w.size() / 4)}, w.data()}).ok());
  auto steps = (*ck)->Steps(/*include_partial=*/true);
  ASSERT_TRUE(steps.ok()) << steps.status();
  std::vector<int64_t> numbers;
  for (const StepSummary& st : *steps) {
    numbers.push_back(st.step);
    EXPECT_TRUE(st.complete) << "step " << st.step;
  }
  EXPECT_EQ(numbers, (std::vector<int64_t>{2, 3, 4}));
  for (int64_t step : {4, 2, 3}) {
    std::fill(w.begin(), w.end(), 0);
    auto got = (*ck)->Load(step);
    ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status();
    EXPECT_TRUE(w == saved[step]) << "step " << step << " differs";
  }
  testutil::RunResult verify = testutil::RunProcess(
      {cli, "--server", addr, "verify", "--job", "rb", "--step", "2"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  // The rebuilt index takes new saves.
  w[5] ^= 1;
  auto h = (*ck)->Save(5);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->Wait().ok()) << h->Wait();
  // A second rebuild keeps the first one's metadata aside.
  EXPECT_EQ((*server)->Stop(SIGTERM), 0);
  testutil::RunResult again =
      testutil::RunProcess({testutil::BinDir() + "/stagger-server", "--data",
                            data, "--rebuild-index"});
  EXPECT_EQ(again.exit_code, 0) << again.out;
  EXPECT_NE(again.out.find("4 complete steps"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("previous metadata kept in " + data +
                           "/meta.before-rebuild-"),
            std::string::npos)
      << again.out;
}

}  // namespace
}  // namespace stagger
