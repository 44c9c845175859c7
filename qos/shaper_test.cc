#include "qos/shaper.h"

#include <gtest/gtest.h>

#include <vector>

#include "qos/clock.h"

namespace stagger::qos {
namespace {

constexpr uint64_t kMB = 1'000'000;

TEST(ShaperTest, WithoutPartsARequestReturnsAtOnce) {
  SimulatedClock clock(42);
  ShaperOptions o;
  o.clock = &clock;
  Shaper shaper(o);
  EXPECT_TRUE(shaper.Request(100 * kMB, Priority::kCheckpoint).ok());
  EXPECT_TRUE(shaper.Request(0, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock.NowNs(), 42);
  ShaperStats s = shaper.stats();
  EXPECT_EQ(s.acquires, 1u);
  EXPECT_EQ(s.bytes, 100 * kMB);
  EXPECT_EQ(s.paced_rate_Bps, DeadlinePacer::kUnlimited);
}

TEST(ShaperTest, PacerSpacesChunksToTheDeadline) {
  SimulatedClock clock;
  DeadlinePacer pacer;
  pacer.Start(0, 100 * kMB, kSec, 0, 0);
  ShaperOptions o;
  o.clock = &clock;
  o.pacer = &pacer;
  Shaper shaper(o);
  for (int k = 0; k < 100; ++k) {
    ASSERT_TRUE(shaper.Request(kMB, Priority::kCheckpoint).ok());
    ASSERT_EQ(clock.NowNs(), k * 10 * kMs) << "chunk " << k;
  }
  ShaperStats s = shaper.stats();
  EXPECT_EQ(s.pace_wait_ns, 990 * kMs);
  EXPECT_EQ(s.bucket_wait_ns, 0);
  EXPECT_DOUBLE_EQ(s.paced_rate_Bps, 100e6);
}

TEST(ShaperTest, RestoreBytesAreNotShapedAndBackgroundBytesAre) {
  SimulatedClock clock;
  DeadlinePacer pacer;
  pacer.Start(0, 10 * kMB, kSec, 0, 0);
  TokenBucket client(1e6, 1000);
  ShaperOptions o;
  o.clock = &clock;
  o.pacer = &pacer;
  o.client_bucket = &client;
  Shaper shaper(o);
  // A job waits to resume from restore bytes: neither paced nor capped,
  // nor booked against the checkpoint's schedule.
  ASSERT_TRUE(shaper.Request(100 * kMB, Priority::kRestore).ok());
  EXPECT_EQ(clock.NowNs(), 0);
  EXPECT_EQ(shaper.stats().bytes, 0u);
  // Background bytes are shaped as checkpoint bytes are.
  ASSERT_TRUE(shaper.Request(kMB, Priority::kBackground).ok());
  ASSERT_TRUE(shaper.Request(kMB, Priority::kBackground).ok());
  EXPECT_GT(clock.NowNs(), 0);
  EXPECT_EQ(shaper.stats().bytes, 2 * kMB);
}

TEST(ShaperTest, TheSlowerBucketDecides) {
  SimulatedClock clock;
  TokenBucket client(1e6, 1000);  // 1 MB/s
  TokenBucket node(0.5e6, 1000);  // 0.5 MB/s
  ShaperOptions o;
  o.clock = &clock;
  o.client_bucket = &client;
  o.node_bucket = &node;
  Shaper shaper(o);
  ASSERT_TRUE(shaper.Request(1000, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock.NowNs(), 0);
  ASSERT_TRUE(shaper.Request(1000, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock.NowNs(), 2 * kMs);
  EXPECT_EQ(shaper.stats().bucket_wait_ns, 2 * kMs);
}

TEST(ShaperTest, CancelEndsPendingAndFutureRequests) {
  SimulatedClock clock;
  DeadlinePacer pacer;
  pacer.Start(0, 2 * kMB, 20 * kMs, 0, 0);  // 1 MB per 10 ms
  ShaperOptions o;
  o.clock = &clock;
  o.pacer = &pacer;
  Shaper shaper(o);
  ASSERT_TRUE(shaper.Request(kMB, Priority::kCheckpoint).ok());
  clock.ScheduleAt(5 * kMs, [&] { shaper.Cancel(); });
  Status s = shaper.Request(kMB, Priority::kCheckpoint);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  // Noticed within one sleep step (1 ms) of the cancellation.
  EXPECT_EQ(clock.NowNs(), 5 * kMs);
  EXPECT_TRUE(shaper.cancelled());
  EXPECT_EQ(shaper.Request(1, Priority::kCheckpoint).code(),
            absl::StatusCode::kCancelled);
}

// Training loop with 100 ms iterations and one collective at [60, 90) ms,
// driven through the simulated clock; a sender that ships 4 MB chunks over
// a 1 GB/s link (4 ms each) as fast as the shaper allows.
class ShaperGateTest : public ::testing::Test {
 protected:
  static constexpr int kIterations = 10;

  void ScheduleTraining() {
    for (int i = 0; i < kIterations; ++i) {
      const int64_t t = i * 100 * kMs;
      clock_.ScheduleAt(t, [this, t] { gate_.IterationBegin(t); });
      clock_.ScheduleAt(t + 60 * kMs,
                        [this, t] { gate_.CollectiveBegin(t + 60 * kMs); });
      clock_.ScheduleAt(t + 90 * kMs,
                        [this, t] { gate_.CollectiveEnd(t + 90 * kMs); });
    }
    clock_.Advance(0);
  }

  static CollectiveGateOptions GateOptions() {
    CollectiveGateOptions o;
    o.guard_ns = 5 * kMs;
    return o;
  }

  SimulatedClock clock_;
  CollectiveGate gate_{GateOptions()};
};

TEST_F(ShaperGateTest, SendsOnlyInPredictedIdleWindows) {
  ScheduleTraining();
  ShaperOptions o;
  o.clock = &clock_;
  o.gate = &gate_;
  Shaper shaper(o);
  shaper.SetLinkRateHint(1e9);
  const int64_t chunk_ns = 4 * kMs;
  std::vector<int64_t> starts;
  while (clock_.NowNs() < kIterations * 100 * kMs) {
    ASSERT_TRUE(shaper.Request(4 * kMB, Priority::kCheckpoint).ok());
    const int64_t start = clock_.NowNs();
    starts.push_back(start);
    clock_.SleepUntilNs(start + chunk_ns);  // the transfer
  }
  for (int64_t start : starts) {
    const int64_t phase = start % (100 * kMs);
    // Never during a collective.
    EXPECT_FALSE(phase >= 60 * kMs && phase < 90 * kMs) << start;
    if (start >= 300 * kMs) {
      // Once learned (at 300 ms), never inside the guard either, and never
      // running into it.
      EXPECT_FALSE(phase >= 55 * kMs && phase < 90 * kMs) << start;
      EXPECT_TRUE(phase + chunk_ns <= 55 * kMs || phase >= 90 * kMs) << start;
    }
  }
  // Before learning the sender only waits out each collective: [60, 90) in
  // iteration 0; in iterations 1 and 2 a chunk started at 58 ms runs into
  // the collective and the wait is [62, 90). Once learned it stops when the
  // next chunk no longer fits before 55 ms (at 54 ms) and resumes at 90 ms:
  // 36 ms in each of iterations 3 to 9.
  ShaperStats s = shaper.stats();
  EXPECT_EQ(s.yield_ns, 30 * kMs + 2 * 28 * kMs + 7 * 36 * kMs);
  EXPECT_EQ(s.pace_wait_ns, 0);
  EXPECT_EQ(s.windows, 11u);
  CollectiveGateStats g = gate_.stats();
  EXPECT_EQ(g.yield_ns, s.yield_ns);
  EXPECT_EQ(g.windows, 11u);
  EXPECT_TRUE(g.learned);
  EXPECT_EQ(g.period_ns, 100 * kMs);
}

TEST_F(ShaperGateTest, BytesThatFitNoWindowGoWhenOpen) {
  ScheduleTraining();
  ShaperOptions o;
  o.clock = &clock_;
  o.gate = &gate_;
  Shaper shaper(o);
  shaper.SetLinkRateHint(1e9);
  clock_.AdvanceTo(302 * kMs);
  ASSERT_TRUE(gate_.stats().learned);
  // 80 ms of transfer: longer than any idle window (65 ms).
  ASSERT_TRUE(shaper.Request(80 * kMB, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock_.NowNs(), 302 * kMs);
  // 60 ms fits only a fresh window: skip the rest of this one.
  ASSERT_TRUE(shaper.Request(60 * kMB, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock_.NowNs(), 390 * kMs);
  EXPECT_EQ(shaper.stats().yield_ns, 88 * kMs);
}

// A gate with a floor rate of 1e6 B/s (1000 bytes per ms), on the fixture's
// clock, and a shaper that waits on it.
class ShaperFloorTest : public ShaperGateTest {
 protected:
  static CollectiveGateOptions FloorOptions() {
    CollectiveGateOptions o = GateOptions();
    o.floor_Bps = 1e6;
    return o;
  }
  static ShaperOptions On(SimulatedClock* clock, CollectiveGate* gate) {
    ShaperOptions o;
    o.clock = clock;
    o.gate = gate;
    return o;
  }

  CollectiveGate floor_gate_{FloorOptions()};
  Shaper shaper_{On(&clock_, &floor_gate_)};
};

TEST_F(ShaperFloorTest, FloorRateKeepsATrickleDuringCollectives) {
  floor_gate_.CollectiveBegin(0);
  ASSERT_TRUE(shaper_.Request(1000, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock_.NowNs(), 0);
  ASSERT_TRUE(shaper_.Request(1000, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock_.NowNs(), kMs);
  EXPECT_EQ(shaper_.stats().yield_ns, kMs);
  EXPECT_EQ(shaper_.stats().windows, 0u);
}

TEST_F(ShaperFloorTest, UrgentTheFloorRateStillApplies) {
  shaper_.SetUrgent(true);
  floor_gate_.CollectiveBegin(0);
  ASSERT_TRUE(shaper_.Request(1000, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock_.NowNs(), 0);
  ASSERT_TRUE(shaper_.Request(1000, Priority::kCheckpoint).ok());
  EXPECT_EQ(clock_.NowNs(), kMs);
  floor_gate_.CollectiveEnd(kMs);
  ASSERT_TRUE(shaper_.Request(1000, Priority::kCheckpoint)
                  .ok());  // nothing open: at once
  EXPECT_EQ(clock_.NowNs(), kMs);
}

}  // namespace
}  // namespace stagger::qos
