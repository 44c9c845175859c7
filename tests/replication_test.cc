// Replication and failover against real stagger-server processes killed
// with SIGKILL: with replicas=2 over three servers, a save survives the
// death of one server (its copies go to the next server of each chunk's
// ranking), every saved step still loads bit-exactly from the servers
// left, and a save that cannot get two copies fails UNAVAILABLE naming
// the servers down while the last complete step stays loadable.
#include <signal.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using testutil::ServerProcess;

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a", "b", "c"}) {
      auto s = ServerProcess::Start(dir_.path() + "/" + name);
      ASSERT_TRUE(s.ok()) << s.status();
      servers_.push_back(std::move(*s));
    }
    w_.resize(6 << 20);
    b_.resize(300 << 10);
  }
  std::string List() const {
    return servers_[0]->grpc() + "," + servers_[1]->grpc() + "," +
           servers_[2]->grpc();
  }
  Result<std::unique_ptr<Checkpointer>> Open(uint32_t replicas = 2) {
    CheckpointerOptions o;
    o.servers = List();
    o.job = "rep";
    o.replicas = replicas;
    o.chunk_size = 256 << 10;  // 26 chunks: every server ranks first for some
    o.rpc_timeout_s = 10;
    auto ck = Checkpointer::Open(o);
    if (!ck.ok()) return ck;
    Status s = (*ck)->Register({"w", "U8", {int64_t(w_.size())}, w_.data()});
    if (s.ok()) {
      s = (*ck)->Register({"b", "U8", {int64_t(b_.size())}, b_.data()});
    }
    if (!s.ok()) return s;
    return ck;
  }
  void Fill(int64_t step) {
    testutil::FillPattern(w_, testutil::WeightSeed(0, step));
    testutil::FillPattern(b_, testutil::BiasSeed(0, step));
  }
  // Loads `step` into zeroed tensors and checks every byte.
  void ExpectLoads(Checkpointer& ck, int64_t step, int64_t as_step) {
    std::fill(w_.begin(), w_.end(), 0);
    std::fill(b_.begin(), b_.end(), 0);
    auto got = ck.Load(step);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, as_step);
    std::vector<char> w(w_.size()), b(b_.size());
    testutil::FillPattern(w, testutil::WeightSeed(0, as_step));
    testutil::FillPattern(b, testutil::BiasSeed(0, as_step));
    EXPECT_TRUE(w == w_) << "tensor w of step " << as_step << " differs";
    EXPECT_TRUE(b == b_) << "tensor b of step " << as_step << " differs";
  }
  Status SaveStep(Checkpointer& ck, int64_t step) {
    Fill(step);
    auto h = ck.Save(step);
    if (!h.ok()) return h.status();
    return h->Wait();
  }

  testutil::TempDir dir_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<char> w_, b_;
};

TEST_F(ReplicationTest, SaveFailsOverAndEveryStepLoadsFromTheSurvivors) {
  auto ck = Open();
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(SaveStep(**ck, 1).ok());

  // Server a dies between saves; the open client learns it from the puts
  // of step 2, which go to the next server of each ranking instead.
  servers_[0]->Stop(SIGKILL);
  EXPECT_EQ((*ck)->Metrics().servers_down, 0u);
  Status s2 = SaveStep(**ck, 2);
  ASSERT_TRUE(s2.ok()) << s2;
  EXPECT_EQ((*ck)->Metrics().servers_down, 1u);

  // A fresh client opens with a down, and reads both steps.
  auto fresh = Open();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ExpectLoads(**fresh, kLatestStep, 2);
  ExpectLoads(**fresh, 1, 1);

  // The CLI reads past the dead server too; gc, which deletes, refuses.
  const std::string cli = testutil::BinDir() + "/stagger";
  testutil::RunResult verify = testutil::RunProcess(
      {cli, "--server", List(), "verify", "--job", "rep", "--step", "1"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  EXPECT_NE(verify.out.find("all 26 chunks good"), std::string::npos)
      << verify.out;
  testutil::RunResult gc = testutil::RunProcess(
      {cli, "--server", List(), "gc", "--job", "rep", "--keep", "1"});
  EXPECT_NE(gc.exit_code, 0) << gc.out;
  EXPECT_NE(gc.out.find("needs every server up"), std::string::npos) << gc.out;

  // With b gone too, c alone holds a copy of every chunk of step 2 (saved
  // with a down: two copies over b and c).
  servers_[1]->Stop(SIGKILL);
  Status s3 = SaveStep(**fresh, 3);
  EXPECT_EQ(s3.code(), absl::StatusCode::kUnavailable) << s3;
  EXPECT_NE(s3.message().find(servers_[0]->grpc()), std::string::npos) << s3;
  ExpectLoads(**fresh, kLatestStep, 2);

  auto last = Open();
  ASSERT_TRUE(last.ok()) << last.status();
  ExpectLoads(**last, kLatestStep, 2);
  // One copy asked: every server must answer.
  EXPECT_EQ(Open(1).status().code(), absl::StatusCode::kUnavailable);
}

// A server killed at a random point of a save: the save either completes
// or fails with a clear error, and the newest complete step always loads
// bit-exactly.
TEST_F(ReplicationTest, KillDuringSaveNeverLosesTheLastCompleteStep) {
  auto ck = Open();
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(SaveStep(**ck, 1).ok());
  std::mt19937 rng(7);
  std::thread killer([this, delay_us = rng() % 40000] {
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    servers_[2]->Stop(SIGKILL);
  });
  Status s = SaveStep(**ck, 2);
  killer.join();
  // Two servers are left for two copies: the save completes.
  ASSERT_TRUE(s.ok()) << s;
  ExpectLoads(**ck, kLatestStep, 2);
  ASSERT_TRUE(SaveStep(**ck, 3).ok());
  auto fresh = Open();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ExpectLoads(**fresh, kLatestStep, 3);
  ExpectLoads(**fresh, 2, 2);
}

TEST_F(ReplicationTest, ReplicasAreValidated) {
  EXPECT_EQ(Open(4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Open(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagger
