// One Checkpointer outlives a restart of its only server (R=1): it saves
// step 1, the server is stopped (SIGTERM, then SIGKILL) and started again
// on the same port and data directory, and the next save on the same
// Checkpointer succeeds, with Steps() listing both; a save in flight across
// the restart waits for it (server_wait_s). Real processes.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

// One server (its data in a temporary directory) and one Checkpointer on
// it, with `bytes` of tensor "w" registered. The parameter is the signal
// that stops the server.
class ReconnectTest : public ::testing::TestWithParam<int> {
 protected:
  void Start(const std::string& job, size_t bytes, double deadline_s = 0,
             double server_wait_s = CheckpointerOptions{}.server_wait_s) {
    data_ = dir_.path() + "/data";
    auto server = testutil::ServerProcess::Start(data_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc_ = server_->grpc();
    CheckpointerOptions o;
    o.servers = grpc_;
    o.job = job;
    o.qos_deadline_s = deadline_s;
    o.server_wait_s = server_wait_s;
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    ck_ = std::move(*ck);
    w_.resize(bytes);
    ASSERT_TRUE(ck_->Register({"w", "U8", {int64_t(bytes)}, w_.data()}).ok());
  }
  // Stops the server with the test's signal and starts it again on the
  // same port and data directory.
  void Restart() {
    server_->Stop(GetParam());
    auto server = testutil::ServerProcess::Start(data_, {"--listen", grpc_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // Saves step 1 (32 MiB paced over seconds) with `server_wait_s`,
  // restarts the server 0.3 s into the save, and says how it ended.
  void SaveAcrossARestart(double server_wait_s, Status* outcome) {
    ASSERT_NO_FATAL_FAILURE(
        Start("mid-save", 32 << 20, /*deadline_s=*/4, server_wait_s));
    testutil::FillPattern(w_, testutil::WeightSeed(0, 1));
    auto h1 = ck_->Save(1);
    ASSERT_TRUE(h1.ok()) << h1.status();
    ASSERT_FALSE(h1->Wait(absl::Milliseconds(300)).has_value())
        << "the save ended before the restart";
    ASSERT_NO_FATAL_FAILURE(Restart());
    *outcome = h1->Wait();
  }

  testutil::TempDir dir_;
  std::string data_, grpc_;
  std::unique_ptr<testutil::ServerProcess> server_;
  std::unique_ptr<Checkpointer> ck_;
  std::vector<char> w_;
};

TEST_P(ReconnectTest, NextSaveSucceedsAfterTheServerRestarts) {
  ASSERT_NO_FATAL_FAILURE(Start("long-running", 2 << 20));
  testutil::FillPattern(w_, testutil::WeightSeed(0, 1));
  auto h1 = ck_->Save(1);
  ASSERT_TRUE(h1.ok()) << h1.status();
  ASSERT_TRUE(h1->Wait().ok()) << h1->Wait();

  ASSERT_NO_FATAL_FAILURE(Restart());
  const auto restarted = std::chrono::steady_clock::now();
  testutil::FillPattern(w_, testutil::WeightSeed(0, 2));
  auto h2 = ck_->Save(2);
  ASSERT_TRUE(h2.ok()) << h2.status();
  ASSERT_TRUE(h2->Wait().ok()) << h2->Wait();
  const double took = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - restarted)
                          .count();
  std::printf("restart to durable step 2 on the same Checkpointer: %.3f s\n",
              took);
  EXPECT_LT(took, 10.0);

  auto steps = ck_->Steps(/*include_partial=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].step + (*steps)[1].step, 3);
  std::fill(w_.begin(), w_.end(), 0);
  auto loaded = ck_->Load(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<char> want(w_.size());
  testutil::FillPattern(want, testutil::WeightSeed(0, 1));
  EXPECT_TRUE(w_ == want);
  EXPECT_EQ(ck_->Metrics().servers_down, 0u);

  // Restarted again, and this time the first call is a load.
  ASSERT_NO_FATAL_FAILURE(Restart());
  std::fill(w_.begin(), w_.end(), 0);
  auto latest = ck_->Load(kLatestStep);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 2);
  testutil::FillPattern(want, testutil::WeightSeed(0, 2));
  EXPECT_TRUE(w_ == want);
}

TEST_P(ReconnectTest, ARestartInTheMiddleOfASaveIsWaitedOut) {
  // The restart lands in the save, and the Checkpointer waits
  // (server_wait_s) for the server to come back and sends it again the
  // copies it lost.
  Status s1;
  ASSERT_NO_FATAL_FAILURE(SaveAcrossARestart(/*server_wait_s=*/60, &s1));
  ASSERT_TRUE(s1.ok()) << s1;
  auto steps = ck_->Steps(/*include_partial=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 1u);
  std::fill(w_.begin(), w_.end(), 0);
  ASSERT_TRUE(ck_->Load(1).ok());
  std::vector<char> want(w_.size());
  testutil::FillPattern(want, testutil::WeightSeed(0, 1));
  EXPECT_TRUE(w_ == want);
}

TEST_P(ReconnectTest, ARestartInTheMiddleOfASaveFailsOnlyThatSave) {
  // As above, with server_wait_s 0: the save fails at once, naming the
  // server.
  Status s1;
  ASSERT_NO_FATAL_FAILURE(SaveAcrossARestart(/*server_wait_s=*/0, &s1));
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.code(), absl::StatusCode::kUnavailable) << s1;
  EXPECT_NE(s1.message().find(grpc_), std::string::npos) << s1;

  // The next save on the same Checkpointer succeeds, and is complete.
  testutil::FillPattern(w_, testutil::WeightSeed(0, 2));
  SaveOptions fast;
  fast.deadline_s = 0;  // not paced
  auto h2 = ck_->Save(2, fast);
  ASSERT_TRUE(h2.ok()) << h2.status();
  ASSERT_TRUE(h2->Wait().ok()) << h2->Wait();
  auto steps = ck_->Steps(/*include_partial=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_FALSE(steps->empty());
  EXPECT_EQ(steps->back().step, 2);
  EXPECT_EQ(steps->size(), 1u);
  std::fill(w_.begin(), w_.end(), 0);
  ASSERT_TRUE(ck_->Load(2).ok());
  std::vector<char> want(w_.size());
  testutil::FillPattern(want, testutil::WeightSeed(0, 2));
  EXPECT_TRUE(w_ == want);
}

INSTANTIATE_TEST_SUITE_P(Signals, ReconnectTest,
                         ::testing::Values(SIGTERM, SIGKILL),
                         [](const auto& info) {
                           return info.param == SIGTERM ? "Sigterm" : "Sigkill";
                         });

}  // namespace
}  // namespace stagger
