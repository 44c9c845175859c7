#include "qos/token_bucket.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "qos/clock.h"

namespace stagger::qos {
namespace {

// 1e6 bytes/s: one byte per microsecond.
TEST(TokenBucketTest, IdleBucketLetsTheBurstThrough) {
  TokenBucket b(1e6, 1000);
  EXPECT_EQ(b.Reserve(0, 500), 0);
  EXPECT_EQ(b.Reserve(0, 500), 0);
  EXPECT_EQ(b.theoretical_arrival_ns(), 1 * kMs);
  // The burst is spent: the next 500 bytes wait for 500 us of refill.
  EXPECT_EQ(b.Reserve(0, 500), kMs / 2);
  EXPECT_EQ(b.theoretical_arrival_ns(), 3 * kMs / 2);
}

TEST(TokenBucketTest, RefillsWhileIdle) {
  TokenBucket b(1e6, 1000);
  EXPECT_EQ(b.Reserve(0, 1500), kMs / 2);
  // 10 ms later the bucket is full again.
  EXPECT_EQ(b.Reserve(10 * kMs, 100), 10 * kMs);
  EXPECT_EQ(b.theoretical_arrival_ns(), 10 * kMs + kMs / 10);
}

TEST(TokenBucketTest, RequestLargerThanBurstWaitsForItsExcess) {
  TokenBucket b(1e6, 1000);
  EXPECT_EQ(b.Reserve(100 * kMs, 3000), 102 * kMs);
}

TEST(TokenBucketTest, LongRunRateIsTheCap) {
  TokenBucket b(1e6, 1000);
  int64_t last = 0;
  for (int i = 0; i < 1000; ++i) last = b.Reserve(0, 1000);
  // 1e6 bytes at 1e6 B/s, the first 1000 free: the last waits 999 ms.
  EXPECT_EQ(last, 999 * kMs);
}

TEST(TokenBucketTest, PeekDoesNotBook) {
  TokenBucket b(1e6, 0);
  EXPECT_EQ(b.Peek(0, 1000), kMs);
  EXPECT_EQ(b.Peek(0, 1000), kMs);
  EXPECT_EQ(b.theoretical_arrival_ns(), 0);
  // Burst 0: every byte is paced.
  EXPECT_EQ(b.Reserve(0, 1000), kMs);
  EXPECT_EQ(b.Reserve(0, 1000), 2 * kMs);
}

TEST(TokenBucketTest, ZeroRateIsUnlimited) {
  TokenBucket b(0, 0);
  EXPECT_TRUE(b.unlimited());
  EXPECT_EQ(b.Reserve(7, uint64_t{1} << 40), 7);
  EXPECT_EQ(b.theoretical_arrival_ns(), 0);
  TokenBucket negative(-5, 10);
  EXPECT_TRUE(negative.unlimited());
}

TEST(TokenBucketTest, HugeRequestSaturatesInsteadOfOverflowing) {
  TokenBucket b(1, 0);
  const int64_t t = b.Reserve(0, ~uint64_t{0});
  EXPECT_EQ(t, int64_t{1} << 60);
}

TEST(TokenBucketTest, ConcurrentReservationsAllCount) {
  TokenBucket b(1e6, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&b] {
      for (int i = 0; i < 1000; ++i) b.Reserve(0, 10);
    });
  }
  for (std::thread& t : threads) t.join();
  // 40,000 bytes booked at 1 us each.
  EXPECT_EQ(b.theoretical_arrival_ns(), 40 * kMs);
}

class SharedTokenBucketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(
        ::testing::TempDir(), "/stagger-tb-", ::getpid(), "-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::remove(path_.c_str());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(SharedTokenBucketTest, TwoOpenersShareOneCap) {
  Result<std::unique_ptr<SharedTokenBucket>> a =
      SharedTokenBucket::Open(path_, 1e6, 1000);
  ASSERT_TRUE(a.ok()) << a.status();
  Result<std::unique_ptr<SharedTokenBucket>> b =
      SharedTokenBucket::Open(path_, 1e6, 1000);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->path(), path_);
  EXPECT_EQ((*a)->Reserve(0, 1000), 0);
  // The burst was used through the other mapping.
  EXPECT_EQ((*b)->Reserve(0, 1000), kMs);
  EXPECT_EQ((*a)->theoretical_arrival_ns(), 2 * kMs);
  // The state outlives both handles.
  a->reset();
  b->reset();
  Result<std::unique_ptr<SharedTokenBucket>> c =
      SharedTokenBucket::Open(path_, 1e6, 1000);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->theoretical_arrival_ns(), 2 * kMs);
}

TEST_F(SharedTokenBucketTest, RejectsForeignFile) {
  {
    std::ofstream out(path_);
    out << "this is not a token bucket, it is a much longer text file that "
           "fills more than the 128 bytes of the bucket layout for sure......";
  }
  Result<std::unique_ptr<SharedTokenBucket>> b =
      SharedTokenBucket::Open(path_, 1e6, 1000);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SharedTokenBucketTest, ReportsBadPaths) {
  EXPECT_EQ(SharedTokenBucket::Open("", 1e6, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      SharedTokenBucket::Open(path_ + "-no-such-dir/x", 1e6, 0).status().code(),
      absl::StatusCode::kNotFound);
}

TEST(SharedTokenBucketPathTest, NodePathValidatesTheName) {
  Result<std::string> p = SharedTokenBucket::NodePath("node-07.rack_2");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "/dev/shm/stagger-node-node-07.rack_2");
  EXPECT_EQ(SharedTokenBucket::NodePath("../etc").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedTokenBucket::NodePath("").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedTokenBucket::NodePath(std::string(129, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagger::qos
