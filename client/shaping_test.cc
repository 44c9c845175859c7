#include "client/shaping.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "qos/clock.h"

namespace stagger::client {
namespace {

using qos::kMs;
constexpr int64_t kSec = 1'000'000'000;

CheckpointerOptions Base() {
  CheckpointerOptions o;
  o.qos_floor_Bps = 0;
  return o;
}

// A Shaping with qos_yield `mode` on `clock`; null (and a test failure) if
// it could not be made.
std::unique_ptr<Shaping> WithYield(const std::string& mode,
                                   qos::SimulatedClock* clock) {
  CheckpointerOptions o = Base();
  o.qos_yield = *ParseQosYield(mode);
  auto s = Shaping::Make(o, clock);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(ShapingTest, RejectsBadOptionsNamingThem) {
  struct Case {
    void (*set)(CheckpointerOptions&);
    const char* field;
  } cases[] = {
      {[](CheckpointerOptions& o) { o.qos_deadline_s = -1; }, "qos_deadline_s"},
      {[](CheckpointerOptions& o) { o.qos_max_Bps = 1.0 / 0.0; },
       "qos_max_Bps"},
      {[](CheckpointerOptions& o) { o.qos_stagger = 1.5; }, "qos_stagger"},
      {[](CheckpointerOptions& o) { o.qos_yield = static_cast<QosYield>(9); },
       "qos_yield"},
      {[](CheckpointerOptions& o) { o.rate_limit_Bps = -5; }, "rate_limit_Bps"},
  };
  for (const Case& c : cases) {
    CheckpointerOptions o = Base();
    c.set(o);
    auto s = Shaping::Make(o);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.field), std::string::npos)
        << s.status();
  }
}

TEST(ShapingTest, WithoutDeadlineNothingWaits) {
  qos::SimulatedClock clock;
  auto s = Shaping::Make(Base(), &clock);
  ASSERT_TRUE(s.ok());
  (*s)->StartSave(100 << 20, 0);
  for (int i = 0; i < 25; ++i) ASSERT_TRUE((*s)->Pace(4 << 20).ok());
  ASSERT_TRUE((*s)->Admit(4 << 20).ok());
  EXPECT_EQ(clock.NowNs(), 0);
}

TEST(ShapingTest, DeadlineSpreadsTheSaveOverItsWindow) {
  qos::SimulatedClock clock;
  auto s = Shaping::Make(Base(), &clock);
  ASSERT_TRUE(s.ok());
  // 40 MB by a 10 s deadline, sending done by 9 s (the last 10% is kept
  // for the bytes in flight and the commit): 4.44 MB/s, a 4 MB chunk every
  // 0.9 s, the last one starting at 8.1 s.
  (*s)->StartSave(40'000'000, 10);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE((*s)->Pace(4'000'000).ok());
    EXPECT_EQ(clock.NowNs(), i * 900 * kMs) << i;
  }
  EXPECT_NEAR((*s)->Since({}).paced_rate_Bps, 40e6 / 9, 1);
}

TEST(ShapingTest, UnchangedChunksTakeTheirShareOfTheSchedule) {
  qos::SimulatedClock clock;
  auto s = Shaping::Make(Base(), &clock);
  ASSERT_TRUE(s.ok());
  (*s)->StartSave(40'000'000, 10);
  (*s)->Skip(20'000'000);  // half the state did not change
  ASSERT_TRUE((*s)->Pace(4'000'000).ok());
  // The schedule moved past the skipped half (4.5 of the 9 s of sending):
  // no burst at the start, and the rest still ends on time.
  EXPECT_EQ(clock.NowNs(), 4500 * kMs);
}

TEST(ShapingTest, RanksStartAtTheirStaggerSlots) {
  for (uint32_t rank = 0; rank < 4; ++rank) {
    qos::SimulatedClock clock;
    CheckpointerOptions o = Base();
    o.rank = rank;
    o.world_size = 4;
    o.ranks_per_node = 1;
    o.qos_stagger = 0.5;
    auto s = Shaping::Make(o, &clock);
    ASSERT_TRUE(s.ok());
    (*s)->StartSave(8'000'000, 8);
    ASSERT_TRUE((*s)->Pace(1'000'000).ok());
    // Starts spread over the first half of the 8 s window: 0, 1, 2, 3 s.
    EXPECT_EQ(clock.NowNs(), rank * kSec) << rank;
  }
}

TEST(ShapingTest, ClientCapHoldsTheRate) {
  qos::SimulatedClock clock;
  CheckpointerOptions o = Base();
  o.rate_limit_Bps = 10'000'000;  // 10 MB/s, burst one 4 MiB chunk
  auto s = Shaping::Make(o, &clock);
  ASSERT_TRUE(s.ok());
  (*s)->StartSave(0, 0);
  for (int i = 0; i < 11; ++i) ASSERT_TRUE((*s)->Admit(1'000'000).ok());
  // 11 MB at 10 MB/s with ~4.19 MB of burst: about 0.68 s, not 1.1 s.
  EXPECT_GE(clock.NowNs(), 600 * kMs);
  EXPECT_LE(clock.NowNs(), 700 * kMs);
}

TEST(ShapingTest, CollectiveHoldsSendingUntilItEnds) {
  qos::SimulatedClock clock;
  auto s = WithYield("pause", &clock);
  ASSERT_NE(s, nullptr);
  Shaping::Mark start = s->Now();
  s->CollectiveBegin();
  clock.ScheduleAt(30 * kMs, [&] { s->CollectiveEnd(); });
  ASSERT_TRUE(s->Admit(1 << 20).ok());
  EXPECT_EQ(clock.NowNs(), 30 * kMs);
  EXPECT_NEAR(s->Since(start).yield_s, 0.030, 1e-9);
}

TEST(ShapingTest, OffIgnoresCollectives) {
  qos::SimulatedClock clock;
  auto s = WithYield("off", &clock);
  ASSERT_NE(s, nullptr);
  s->CollectiveBegin();
  ASSERT_TRUE(s->Admit(1 << 20).ok());
  EXPECT_EQ(clock.NowNs(), 0);
  s->IterationBegin();  // no gate: nothing to report
  EXPECT_FALSE(s->GateStats().learned);
  EXPECT_EQ(s->GateStats().models_learned, 0u);
}

// Learns iterations of 100 ms with a collective in their first 40 ms
// (marks at 0..400 ms), then runs iteration 5 at 500 ms; the clock ends at
// 590 ms, 5 ms before the gate closes for iteration 6 (guard: 5% of the
// period), with iteration 6's collective scheduled at [600, 640) ms.
void LearnAndReachTheNextGuard(Shaping& s, qos::SimulatedClock& clock) {
  for (int i = 0; i <= 5; ++i) {
    clock.AdvanceTo(i * 100 * kMs);
    s.IterationBegin();
    s.CollectiveBegin();
    clock.AdvanceTo((i * 100 + 40) * kMs);
    s.CollectiveEnd();
  }
  clock.AdvanceTo(590 * kMs);
  clock.ScheduleAt(600 * kMs, [&] {
    s.IterationBegin();
    s.CollectiveBegin();
  });
  clock.ScheduleAt(640 * kMs, [&] { s.CollectiveEnd(); });
  s.SetLinkRateHint(100e6);  // 4 MB take 40 ms: no fit before 595 ms
}

TEST(ShapingTest, WhileACallerWaitsOnlyOpenCollectivesHoldBytes) {
  for (double deadline_s : {100.0, 0.1}) {
    // Within its deadline, and past it (due at 100 ms) with nobody
    // waiting, a 4 MB chunk waits out the window it does not fit and the
    // collective after it.
    qos::SimulatedClock clock;
    auto s = WithYield("learn", &clock);
    ASSERT_NE(s, nullptr);
    s->StartSave(40'000'000, deadline_s);
    LearnAndReachTheNextGuard(*s, clock);
    EXPECT_FALSE(s->FitsWindow(4'000'000)) << deadline_s;
    ASSERT_TRUE(s->Admit(4'000'000).ok());
    EXPECT_EQ(clock.NowNs(), 640 * kMs) << deadline_s;
  }
  {
    // While Save() waits for this save, the chunk goes at once, though it
    // will meet the collective predicted at 600 ms...
    qos::SimulatedClock clock;
    auto s = WithYield("learn", &clock);
    ASSERT_NE(s, nullptr);
    s->StartSave(40'000'000, /*deadline_s=*/100);
    LearnAndReachTheNextGuard(*s, clock);
    s->CallerWaits(true);
    EXPECT_TRUE(s->FitsWindow(4'000'000));
    ASSERT_TRUE(s->Admit(4'000'000).ok());
    EXPECT_EQ(clock.NowNs(), 590 * kMs);
    // ...but never into a collective that is open.
    clock.AdvanceTo(610 * kMs);
    ASSERT_TRUE(s->Admit(4'000'000).ok());
    EXPECT_EQ(clock.NowNs(), 640 * kMs);
    // Once nobody waits, predictions count again.
    s->CallerWaits(false);
    clock.AdvanceTo(690 * kMs);
    EXPECT_FALSE(s->FitsWindow(4'000'000));
  }
}

TEST(ShapingTest, CpuWorkPausesWhileACollectiveIsMarked) {
  qos::SimulatedClock clock;
  auto s = WithYield("pause", &clock);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->LowPriority());  // background_cpu "idle", the default
  Shaping::Mark start = s->Now();
  ASSERT_TRUE(s->AwaitCpu().ok());  // nothing marked: at once
  EXPECT_EQ(clock.NowNs(), 0);
  s->CollectiveBegin();
  clock.ScheduleAt(25 * kMs, [&] { s->CollectiveEnd(); });
  ASSERT_TRUE(s->AwaitCpu().ok());
  EXPECT_EQ(clock.NowNs(), 25 * kMs);
  EXPECT_NEAR(s->Since(start).cpu_yield_s, 0.025, 1e-9);
  EXPECT_EQ(s->Since(start).yield_s, 0);  // no bytes were held back
}

TEST(ShapingTest, CpuWorkPausesInPredictedCollectivesUnlessACallerWaits) {
  {
    qos::SimulatedClock clock;
    auto s = WithYield("learn", &clock);
    ASSERT_NE(s, nullptr);
    LearnAndReachTheNextGuard(*s, clock);
    clock.AdvanceTo(596 * kMs);  // inside the guard before iteration 6
    ASSERT_TRUE(s->AwaitCpu().ok());
    EXPECT_EQ(clock.NowNs(), 640 * kMs);
  }
  {
    qos::SimulatedClock clock;
    auto s = WithYield("learn", &clock);
    ASSERT_NE(s, nullptr);
    LearnAndReachTheNextGuard(*s, clock);
    clock.AdvanceTo(596 * kMs);
    s->CallerWaits(true);  // training is stopped: the prediction is moot
    ASSERT_TRUE(s->AwaitCpu().ok());
    EXPECT_EQ(clock.NowNs(), 596 * kMs);
    clock.AdvanceTo(610 * kMs);  // an open collective still holds it
    ASSERT_TRUE(s->AwaitCpu().ok());
    EXPECT_EQ(clock.NowNs(), 640 * kMs);
  }
}

TEST(ShapingTest, NormalBackgroundCpuDoesNotPause) {
  qos::SimulatedClock clock;
  CheckpointerOptions o = Base();
  o.qos_yield = QosYield::kPause;
  o.background_cpu = BackgroundCpu::kNormal;
  auto s = Shaping::Make(o, &clock);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE((*s)->LowPriority());
  (*s)->CollectiveBegin();
  ASSERT_TRUE((*s)->AwaitCpu().ok());
  EXPECT_EQ(clock.NowNs(), 0);
}

TEST(ShapingTest, CancelEndsACpuPause) {
  qos::ManualClock clock;
  CheckpointerOptions o = Base();
  o.qos_yield = QosYield::kPause;
  auto made = Shaping::Make(o, &clock);
  ASSERT_TRUE(made.ok()) << made.status();
  Shaping& s = **made;
  s.CollectiveBegin();
  Status result;
  std::thread waiter([&] { result = s.AwaitCpu(); });
  ASSERT_TRUE(clock.AwaitSleepers(1, absl::Seconds(10)));
  s.Cancel();
  clock.Advance(2 * kMs);  // the next step sees the cancel
  waiter.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled);
}

TEST(ShapingTest, GateStatsShowTheLearnedIteration) {
  qos::SimulatedClock clock;
  auto s = WithYield("learn", &clock);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->GateStats().learned);
  // Iterations of 100 ms, a collective in the first 40 ms of each.
  for (int i = 0; i < 4; ++i) {
    clock.AdvanceTo(i * 100 * kMs);
    s->IterationBegin();
    s->CollectiveBegin();
    clock.AdvanceTo((i * 100 + 40) * kMs);
    s->CollectiveEnd();
  }
  clock.AdvanceTo(400 * kMs);
  s->IterationBegin();
  qos::CollectiveGateStats g = s->GateStats();
  EXPECT_TRUE(g.learned);
  EXPECT_EQ(g.period_ns, 100 * kMs);
  EXPECT_EQ(g.models_learned, 1u);
  EXPECT_EQ(g.models_dropped, 0u);
}

}  // namespace
}  // namespace stagger::client
