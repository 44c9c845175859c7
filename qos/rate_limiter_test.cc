#include "qos/rate_limiter.h"

#include <gtest/gtest.h>

#include <thread>

#include "qos/clock.h"

namespace stagger::qos {
namespace {

TEST(BackgroundLimiterTest, TheCapSpacesRequestsWithoutBurst) {
  SimulatedClock clock;
  BackgroundLimiter limiter({.bytes_per_s = 1e6, .clock = &clock});
  // 1e6 bytes/s, no burst: every 1000 bytes wait a millisecond, even the
  // first ones.
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(limiter.Request(1000, Priority::kBackground).ok());
    EXPECT_EQ(clock.NowNs(), i * kMs);
  }
  EXPECT_EQ(limiter.capped_ns(), 3 * kMs);
  EXPECT_EQ(limiter.yielded_ns(), 0);
  // Time spent elsewhere is not made up for.
  clock.Advance(10 * kMs);
  ASSERT_TRUE(limiter.Request(1000, Priority::kBackground).ok());
  EXPECT_EQ(clock.NowNs(), 14 * kMs);
}

TEST(BackgroundLimiterTest, WithoutACapNothingWaits) {
  SimulatedClock clock;
  BackgroundLimiter limiter({.clock = &clock});
  ASSERT_TRUE(limiter.Request(1 << 30, Priority::kBackground).ok());
  EXPECT_EQ(clock.NowNs(), 0);
  EXPECT_EQ(clock.sleep_calls(), 0);
}

TEST(BackgroundLimiterTest, BackgroundWorkYieldsWhileClientsAreServed) {
  SimulatedClock clock;
  int asked = 0;
  BackgroundLimiter limiter({.clients_busy =
                                 [&] {
                                   ++asked;
                                   return clock.NowNs() < 9 * kMs;
                                 },
                             .poll_ns = 2 * kMs,
                             .clock = &clock});
  ASSERT_TRUE(limiter.Request(4096, Priority::kBackground).ok());
  // Looked at 0, 2, 4, 6, 8 (busy) and 10 ms (served).
  EXPECT_EQ(clock.NowNs(), 10 * kMs);
  EXPECT_EQ(asked, 6);
  EXPECT_EQ(limiter.yielded_ns(), 10 * kMs);
  // Clients' own priorities do not yield to clients.
  SimulatedClock other;
  int asked_other = 0;
  BackgroundLimiter clients({.clients_busy =
                                 [&] {
                                   ++asked_other;
                                   return true;
                                 },
                             .clock = &other});
  ASSERT_TRUE(clients.Request(4096, Priority::kCheckpoint).ok());
  ASSERT_TRUE(clients.Request(4096, Priority::kRestore).ok());
  EXPECT_EQ(asked_other, 0);
  EXPECT_EQ(other.NowNs(), 0);
}

TEST(BackgroundLimiterTest, AYieldEndsAfterMaxYieldSoTheWorkProgresses) {
  SimulatedClock clock;
  BackgroundLimiter limiter({.clients_busy = [] { return true; },
                             .max_yield_ns = 7 * kMs,
                             .poll_ns = 2 * kMs,
                             .clock = &clock});
  ASSERT_TRUE(limiter.Request(1, Priority::kBackground).ok());
  EXPECT_EQ(clock.NowNs(), 7 * kMs);  // 2 + 2 + 2 + 1
  ASSERT_TRUE(limiter.Request(1, Priority::kBackground).ok());
  EXPECT_EQ(clock.NowNs(), 14 * kMs);
  EXPECT_EQ(limiter.yielded_ns(), 14 * kMs);
  // max_yield_ns 0: no yield at all.
  BackgroundLimiter no_yield({.clients_busy = [] { return true; },
                              .max_yield_ns = 0,
                              .clock = &clock});
  ASSERT_TRUE(no_yield.Request(1, Priority::kBackground).ok());
  EXPECT_EQ(clock.NowNs(), 14 * kMs);
}

TEST(BackgroundLimiterTest, CancelEndsAWaitingRequestAndRefusesTheNext) {
  ManualClock clock;
  BackgroundLimiter limiter(
      {.bytes_per_s = 1e6, .poll_ns = 2 * kMs, .clock = &clock});
  Status waited;
  // 1 MB at 1 MB/s: a second's wait, in steps of 2 ms.
  std::thread t(
      [&] { waited = limiter.Request(1'000'000, Priority::kBackground); });
  ASSERT_TRUE(clock.AwaitSleepers(1, absl::Seconds(10)));
  limiter.Cancel();
  clock.Advance(2 * kMs);  // the end of the step it sleeps
  t.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kCancelled) << waited;
  EXPECT_LT(clock.NowNs(), 1000 * kMs);
  EXPECT_EQ(limiter.Request(1, Priority::kBackground).code(),
            absl::StatusCode::kCancelled);
}

TEST(PriorityTest, NamesSayWhoWaits) {
  EXPECT_EQ(NameOf(Priority::kRestore), "restore");
  EXPECT_EQ(NameOf(Priority::kCheckpoint), "checkpoint");
  EXPECT_EQ(NameOf(Priority::kBackground), "background");
}

}  // namespace
}  // namespace stagger::qos
