#include "client/staging_prep.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"

namespace stagger::client {
namespace {

TEST(StagingPrepTest, ABurstOfRequestsPreparesOnceForTheLast) {
  absl::Mutex mu;
  std::vector<uint64_t> seen;
  absl::Notification ran;
  StagingPrep prep(
      [&](uint64_t bytes, const std::function<bool()>&) {
        absl::MutexLock lock(&mu);
        seen.push_back(bytes);
        ran.Notify();
        return absl::OkStatus();
      },
      /*low_priority=*/false);
  // As Register() asks, once per tensor: only the last request's size is
  // prepared, once the requests went quiet.
  for (uint64_t b = 1; b <= 100; ++b) {
    prep.Request(b << 20, absl::Milliseconds(5));
  }
  prep.Request(123, absl::Milliseconds(5));
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  prep.Settle();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(seen, std::vector<uint64_t>{123});
  EXPECT_EQ(prep.runs(), 1);
}

TEST(StagingPrepTest, SettleDropsARequestStillWaiting) {
  std::atomic<int> calls{0};
  StagingPrep prep(
      [&](uint64_t, const std::function<bool()>&) {
        ++calls;
        return absl::OkStatus();
      },
      false);
  prep.Request(1, absl::Hours(1));
  prep.Settle();
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(prep.runs(), 0);
}  // the destructor does not wait out the hour

TEST(StagingPrepTest, SettleCancelsAPreparationUnderWayAndWaitsForIt) {
  absl::Notification started;
  std::atomic<bool> finished{false};
  StagingPrep prep(
      [&](uint64_t, const std::function<bool()>& cancelled) {
        started.Notify();
        while (!cancelled()) std::this_thread::yield();  // one step at a time
        finished = true;
        return absl::CancelledError("a save came");
      },
      false);
  prep.Request(1, absl::ZeroDuration());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(30)));
  prep.Settle();  // returns only once the preparation has
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(prep.runs(), 1);
  EXPECT_EQ(prep.last_status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace stagger::client
