// One Checkpointer outlives a restart of its only server (R=1): it saves
// step 1, the server is stopped (SIGTERM, then SIGKILL) and started again
// on the same port and data directory, and the next save on the same
// Checkpointer succeeds, with Steps() listing both. Real processes.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

class ReconnectTest : public ::testing::TestWithParam<int> {};

TEST_P(ReconnectTest, NextSaveSucceedsAfterTheServerRestarts) {
  testutil::TempDir dir;
  const std::string data = dir.path() + "/data";
  auto server = testutil::ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string grpc = (*server)->grpc();

  CheckpointerOptions o;
  o.servers = grpc;
  o.job = "long-running";
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  std::vector<char> w(2 << 20);
  ASSERT_TRUE((*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
  testutil::FillPattern(w, testutil::WeightSeed(0, 1));
  auto h1 = (*ck)->Save(1);
  ASSERT_TRUE(h1.ok()) << h1.status();
  ASSERT_TRUE(h1->Wait().ok()) << h1->Wait();

  (*server)->Stop(GetParam());
  server = testutil::ServerProcess::Start(data, {"--listen", grpc});
  ASSERT_TRUE(server.ok()) << server.status();
  const auto restarted = std::chrono::steady_clock::now();

  testutil::FillPattern(w, testutil::WeightSeed(0, 2));
  auto h2 = (*ck)->Save(2);
  ASSERT_TRUE(h2.ok()) << h2.status();
  ASSERT_TRUE(h2->Wait().ok()) << h2->Wait();
  const double took = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - restarted)
                          .count();
  std::printf("restart to durable step 2 on the same Checkpointer: %.3f s\n",
              took);
  EXPECT_LT(took, 10.0);

  auto steps = (*ck)->Steps(/*include_partial=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].step + (*steps)[1].step, 3);
  std::fill(w.begin(), w.end(), 0);
  auto loaded = (*ck)->Load(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<char> want(w.size());
  testutil::FillPattern(want, testutil::WeightSeed(0, 1));
  EXPECT_TRUE(w == want);
  EXPECT_EQ((*ck)->Metrics().servers_down, 0u);

  // Restarted again, and this time the first call is a load.
  (*server)->Stop(GetParam());
  server = testutil::ServerProcess::Start(data, {"--listen", grpc});
  ASSERT_TRUE(server.ok()) << server.status();
  std::fill(w.begin(), w.end(), 0);
  auto latest = (*ck)->Load(kLatestStep);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 2);
  testutil::FillPattern(want, testutil::WeightSeed(0, 2));
  EXPECT_TRUE(w == want);
}

TEST_P(ReconnectTest, ARestartInTheMiddleOfASaveFailsOnlyThatSave) {
  testutil::TempDir dir;
  const std::string data = dir.path() + "/data";
  auto server = testutil::ServerProcess::Start(data);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string grpc = (*server)->grpc();

  CheckpointerOptions o;
  o.servers = grpc;
  o.job = "mid-save";
  o.qos_deadline_s = 4;  // 32 MiB paced over seconds: the restart lands in it
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  std::vector<char> w(32 << 20);
  ASSERT_TRUE((*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
  testutil::FillPattern(w, testutil::WeightSeed(0, 1));
  auto h1 = (*ck)->Save(1);
  ASSERT_TRUE(h1.ok()) << h1.status();
  ASSERT_FALSE(h1->Wait(absl::Milliseconds(300)).has_value())
      << "the save ended before the restart";
  (*server)->Stop(GetParam());
  server = testutil::ServerProcess::Start(data, {"--listen", grpc});
  ASSERT_TRUE(server.ok()) << server.status();

  // That save either failed, naming the server, or completed.
  Status s1 = h1->Wait();
  if (!s1.ok()) {
    EXPECT_EQ(s1.code(), absl::StatusCode::kUnavailable) << s1;
    EXPECT_NE(s1.message().find(grpc), std::string::npos) << s1;
  }
  std::printf("save in flight across the restart: %s\n",
              s1.ok() ? "completed" : std::string(s1.message()).c_str());

  // The next save on the same Checkpointer succeeds, and is complete.
  testutil::FillPattern(w, testutil::WeightSeed(0, 2));
  SaveOptions fast;
  fast.deadline_s = 0;  // not paced
  auto h2 = (*ck)->Save(2, fast);
  ASSERT_TRUE(h2.ok()) << h2.status();
  ASSERT_TRUE(h2->Wait().ok()) << h2->Wait();
  auto steps = (*ck)->Steps(/*include_partial=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_FALSE(steps->empty());
  EXPECT_EQ(steps->back().step, 2);
  EXPECT_EQ(steps->size(), s1.ok() ? 2u : 1u);
  std::fill(w.begin(), w.end(), 0);
  ASSERT_TRUE((*ck)->Load(2).ok());
  std::vector<char> want(w.size());
  testutil::FillPattern(want, testutil::WeightSeed(0, 2));
  EXPECT_TRUE(w == want);
}

INSTANTIATE_TEST_SUITE_P(Signals, ReconnectTest,
                         ::testing::Values(SIGTERM, SIGKILL),
                         [](const auto& info) {
                           return info.param == SIGTERM ? "Sigterm" : "Sigkill";
                         });

}  // namespace
}  // namespace stagger
