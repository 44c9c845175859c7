#include "qos/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace stagger::qos {
namespace {

TEST(SimulatedClockTest, MovesOnlyForward) {
  SimulatedClock clock(100);
  EXPECT_EQ(clock.NowNs(), 100);
  clock.Advance(50);
  EXPECT_EQ(clock.NowNs(), 150);
  clock.AdvanceTo(120);
  EXPECT_EQ(clock.NowNs(), 150);
  clock.SleepUntilNs(140);
  EXPECT_EQ(clock.NowNs(), 150);
  clock.SleepUntilNs(400);
  EXPECT_EQ(clock.NowNs(), 400);
  EXPECT_EQ(clock.sleep_calls(), 2);
  EXPECT_EQ(clock.slept_ns(), 250);
}

TEST(SimulatedClockTest, RunsCallbacksInTimeOrderAtTheirTime) {
  SimulatedClock clock;
  std::vector<std::pair<int, int64_t>> seen;
  clock.ScheduleAt(30, [&] { seen.push_back({3, clock.NowNs()}); });
  clock.ScheduleAt(10, [&] { seen.push_back({1, clock.NowNs()}); });
  clock.ScheduleAt(10, [&] {
    seen.push_back({2, clock.NowNs()});
    // Scheduled from a callback, still inside the current advance.
    clock.ScheduleAt(20, [&] { seen.push_back({4, clock.NowNs()}); });
  });
  clock.ScheduleAt(50, [&] { seen.push_back({5, clock.NowNs()}); });
  clock.SleepUntilNs(40);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], std::make_pair(1, int64_t{10}));
  EXPECT_EQ(seen[1], std::make_pair(2, int64_t{10}));
  EXPECT_EQ(seen[2], std::make_pair(4, int64_t{20}));
  EXPECT_EQ(seen[3], std::make_pair(3, int64_t{30}));
  EXPECT_EQ(clock.NowNs(), 40);
}

TEST(SimulatedClockTest, AdvanceZeroRunsDueCallbacks) {
  SimulatedClock clock(5);
  int runs = 0;
  clock.ScheduleAt(0, [&] { ++runs; });
  EXPECT_EQ(runs, 0);
  clock.Advance(0);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(clock.NowNs(), 5);
}

TEST(SimulatedClockTest, ConcurrentAdvancesAddUp) {
  SimulatedClock clock;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&clock] {
      for (int i = 0; i < 1000; ++i) clock.Advance(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(clock.NowNs(), 4000);
}

TEST(ManualClockTest, SleepersWaitUntilTheTimeIsMovedToThem) {
  ManualClock clock(100);
  std::atomic<int64_t> woke_at{-1};
  std::thread sleeper([&] {
    clock.SleepUntilNs(150);
    woke_at = clock.NowNs();
  });
  ASSERT_TRUE(clock.AwaitSleepers(1, absl::Seconds(10)));
  clock.Advance(30);
  // Still short of 150: the sleeper is still blocked.
  ASSERT_TRUE(clock.AwaitSleepers(1, absl::Seconds(10)));
  EXPECT_EQ(woke_at.load(), -1);
  clock.Advance(30);
  sleeper.join();
  EXPECT_EQ(woke_at.load(), 160);
  EXPECT_FALSE(clock.AwaitSleepers(1, absl::Milliseconds(10)));
  // A time already passed does not block.
  clock.SleepUntilNs(10);
  EXPECT_EQ(clock.NowNs(), 160);
}

TEST(RealClockTest, IsMonotonicAndDoesNotSleepForPastTimes) {
  Clock* clock = RealClock::Get();
  EXPECT_EQ(clock, RealClock::Get());
  const int64_t a = clock->NowNs();
  clock->SleepUntilNs(a - 1'000'000'000);
  const int64_t b = clock->NowNs();
  EXPECT_GE(b, a);
  EXPECT_LT(b - a, 500'000'000);
}

}  // namespace
}  // namespace stagger::qos
