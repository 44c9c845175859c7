#include "qos/collective_gate.h"

#include <gtest/gtest.h>

#include <limits>
#include <utility>
#include <vector>

#include "qos/clock.h"

namespace stagger::qos {
namespace {

constexpr int64_t kForever = std::numeric_limits<int64_t>::max();

using Spans = std::vector<std::pair<int64_t, int64_t>>;

// One iteration starting at `begin_ms`: its IterationBegin mark (if `mark`),
// then each collective, given as [begin, end) offsets in ms.
void Iteration(CollectiveGate& g, int64_t begin_ms, const Spans& spans,
               bool mark = true) {
  if (mark) g.IterationBegin(begin_ms * kMs);
  for (auto [b, e] : spans) {
    g.CollectiveBegin((begin_ms + b) * kMs);
    g.CollectiveEnd((begin_ms + e) * kMs);
  }
}

// Three iterations of 100 ms with a collective at [60, 90), then the mark
// of the fourth: the default gate learns at 300 ms.
void LearnSixtyToNinety(CollectiveGate& g) {
  for (int i = 0; i < 3; ++i) Iteration(g, i * 100, {{60, 90}});
  g.IterationBegin(300 * kMs);
}

TEST(CollectiveGateTest, WithoutMarksItIsOpen) {
  CollectiveGate g;
  EXPECT_TRUE(g.MaySend(0));
  EXPECT_EQ(g.NextOpenNs(5), 5);
  EXPECT_EQ(g.OpenUntilNs(5), kForever);
  EXPECT_EQ(g.MaxIdleWindowNs(5), kForever);
  EXPECT_FALSE(g.stats().learned);
}

TEST(CollectiveGateTest, BeforeLearningClosesOnlyDuringCollectives) {
  CollectiveGate g;
  g.IterationBegin(0);
  g.CollectiveBegin(60 * kMs);
  EXPECT_FALSE(g.MaySend(61 * kMs));
  // No prediction: it would open by the quiet rule, 10 s after the mark.
  EXPECT_EQ(g.NextOpenNs(61 * kMs), 60 * kMs + 10 * kSec);
  EXPECT_EQ(g.OpenUntilNs(61 * kMs), 61 * kMs);
  g.CollectiveEnd(90 * kMs);
  EXPECT_TRUE(g.MaySend(90 * kMs));
  EXPECT_EQ(g.OpenUntilNs(90 * kMs), kForever);
}

TEST(CollectiveGateTest, NestedCollectivesKeepItClosed) {
  CollectiveGate g;
  g.CollectiveBegin(10);
  g.CollectiveBegin(20);
  g.CollectiveEnd(30);
  EXPECT_FALSE(g.MaySend(30));
  g.CollectiveEnd(40);
  EXPECT_TRUE(g.MaySend(40));
  g.CollectiveEnd(50);  // unmatched: ignored
  g.CollectiveBegin(60);
  EXPECT_FALSE(g.MaySend(60));
  EXPECT_EQ(g.stats().collectives, 3u);
}

TEST(CollectiveGateTest, LearnsFromIterationMarksAndYieldsBeforeCollectives) {
  CollectiveGate g;  // guard 2 ms
  for (int i = 0; i < 3; ++i) {
    Iteration(g, i * 100, {{60, 90}});
    EXPECT_FALSE(g.stats().learned) << i;
  }
  g.IterationBegin(300 * kMs);
  CollectiveGateStats s = g.stats();
  EXPECT_TRUE(s.learned);
  EXPECT_EQ(s.period_ns, 100 * kMs);
  EXPECT_EQ(s.models_learned, 1u);

  EXPECT_TRUE(g.MaySend(358 * kMs - 1));
  EXPECT_FALSE(g.MaySend(358 * kMs));
  EXPECT_FALSE(g.MaySend(390 * kMs - 1));
  EXPECT_EQ(g.OpenUntilNs(310 * kMs), 358 * kMs);
  EXPECT_EQ(g.NextOpenNs(310 * kMs), 310 * kMs);
  // Idle from 90 ms to the next 58 ms.
  EXPECT_EQ(g.MaxIdleWindowNs(310 * kMs), 68 * kMs);
  // The collective predicted at 360 ms has not begun by its predicted end:
  // it is late, not skipped, so the gate stays closed until it comes (by
  // the quiet rule at the latest: 4 periods after the last mark).
  EXPECT_FALSE(g.MaySend(390 * kMs));
  EXPECT_EQ(g.NextOpenNs(358 * kMs), 700 * kMs);

  // The collective comes and ends early: the window ends with it.
  g.CollectiveBegin(360 * kMs);
  EXPECT_EQ(g.NextOpenNs(365 * kMs), 390 * kMs);
  g.CollectiveEnd(380 * kMs);
  EXPECT_TRUE(g.MaySend(380 * kMs));
  EXPECT_EQ(g.OpenUntilNs(380 * kMs), 458 * kMs);
  // Next iteration's window.
  EXPECT_EQ(g.OpenUntilNs(395 * kMs), 458 * kMs);
}

TEST(CollectiveGateTest,
     ACollectiveRunningPastTheNextPredictedOneKeepsItClosed) {
  CollectiveGate g;  // guard 2 ms
  LearnSixtyToNinety(g);
  // This iteration's collective runs until 480 ms, past the next
  // iteration's predicted window [458, 490). That window's collective has
  // not come (its iteration has not even begun): were the gate to open at
  // 490, bytes sent then would meet the collective whenever the late
  // iteration starts.
  g.CollectiveBegin(360 * kMs);
  g.CollectiveEnd(480 * kMs);
  EXPECT_FALSE(g.MaySend(480 * kMs));
  EXPECT_FALSE(g.MaySend(495 * kMs));
  EXPECT_EQ(g.OpenUntilNs(495 * kMs), 495 * kMs);
  // The late iteration begins at 510 ms: anchored there, its window is
  // [568, 600) and the time before it is idle again.
  g.IterationBegin(510 * kMs);
  EXPECT_TRUE(g.MaySend(510 * kMs));
  EXPECT_EQ(g.OpenUntilNs(510 * kMs), 568 * kMs);
  EXPECT_TRUE(g.stats().learned);
}

TEST(CollectiveGateTest, SlowedIterationsKeepTheModel) {
  CollectiveGate g;  // guard 2 ms
  LearnSixtyToNinety(g);
  // Other traffic slows the collectives: they end at 120 ms and the
  // iterations take 130 ms. Still the same job: the model stays.
  int64_t t = 300;
  for (int i = 0; i < 5; ++i, t += 130) {
    if (i > 0) g.IterationBegin(t * kMs);
    g.CollectiveBegin((t + 60) * kMs);
    g.CollectiveEnd((t + 120) * kMs);
  }
  g.IterationBegin(t * kMs);
  EXPECT_TRUE(g.stats().learned);
  EXPECT_EQ(g.stats().models_dropped, 0u);
  // Anchored at the last mark: closes 2 ms before its 60 ms phase.
  EXPECT_TRUE(g.MaySend((t + 58) * kMs - 1));
  EXPECT_FALSE(g.MaySend((t + 58) * kMs));
  // A lasting change (8 long iterations in a row) is learned anew.
  for (int i = 0; i < 8; ++i, t += 130) {
    if (i > 0) g.IterationBegin(t * kMs);
    g.CollectiveBegin((t + 60) * kMs);
    g.CollectiveEnd((t + 120) * kMs);
  }
  g.IterationBegin(t * kMs);
  EXPECT_GE(g.stats().models_dropped, 1u);
}

TEST(CollectiveGateTest, ShorterIterationsDropTheModel) {
  CollectiveGate g;
  LearnSixtyToNinety(g);
  // Iterations of 70 ms with the collective at [30, 50): predictions
  // would close too late. Two bad iterations drop the model.
  int64_t t = 300;
  for (int i = 0; i < 3; ++i, t += 70) {
    if (i > 0) g.IterationBegin(t * kMs);
    g.CollectiveBegin((t + 30) * kMs);
    g.CollectiveEnd((t + 50) * kMs);
  }
  g.IterationBegin(t * kMs);
  EXPECT_GE(g.stats().models_dropped, 1u);
}

TEST(CollectiveGateTest, WithoutLearningItClosesOnlyDuringCollectives) {
  CollectiveGateOptions o;
  o.learn = false;
  CollectiveGate g(o);
  for (int i = 0; i < 5; ++i) Iteration(g, i * 100, {{60, 90}});
  g.IterationBegin(500 * kMs);
  EXPECT_FALSE(g.stats().learned);
  // Where a learning gate would close before the collective, this one is
  // open until the collective actually begins.
  EXPECT_TRUE(g.MaySend(559 * kMs));
  EXPECT_EQ(g.OpenUntilNs(510 * kMs), kForever);
  g.CollectiveBegin(560 * kMs);
  EXPECT_FALSE(g.MaySend(561 * kMs));
  g.CollectiveEnd(590 * kMs);
  EXPECT_TRUE(g.MaySend(590 * kMs));
}

TEST(CollectiveGateTest, GuardMayBeAFractionOfThePeriod) {
  CollectiveGateOptions o;
  o.guard_fraction = 0.1;
  CollectiveGate g(o);
  LearnSixtyToNinety(g);
  EXPECT_TRUE(g.MaySend(350 * kMs - 1));
  EXPECT_FALSE(g.MaySend(350 * kMs));
}

TEST(CollectiveGateTest, LearnsFromCollectiveSpacingWithoutIterationMarks) {
  CollectiveGate g;
  // Two collectives per 100 ms iteration: [20, 30) and [60, 90).
  for (int i = 0; i < 3; ++i) {
    Iteration(g, i * 100, {{20, 30}, {60, 90}}, /*mark=*/false);
  }
  EXPECT_FALSE(g.stats().learned);
  Iteration(g, 300, {{20, 30}}, /*mark=*/false);
  ASSERT_TRUE(g.stats().learned);
  EXPECT_EQ(g.stats().period_ns, 100 * kMs);
  EXPECT_EQ(g.OpenUntilNs(340 * kMs), 358 * kMs);
  EXPECT_TRUE(g.MaySend(357 * kMs));
  EXPECT_FALSE(g.MaySend(358 * kMs));
  // Until the collective predicted at 360 ms comes, by the quiet rule at
  // the latest (4 periods after the last mark, 330 ms).
  EXPECT_EQ(g.NextOpenNs(358 * kMs), 730 * kMs);
  EXPECT_EQ(g.MaxIdleWindowNs(395 * kMs), 28 * kMs);
  // The pattern continues: still learned, and re-anchored on phase 0.
  Iteration(g, 300, {{60, 90}}, /*mark=*/false);
  EXPECT_EQ(g.OpenUntilNs(395 * kMs), 418 * kMs);
  Iteration(g, 400, {{21, 30}}, /*mark=*/false);
  EXPECT_TRUE(g.stats().learned);
  EXPECT_EQ(g.OpenUntilNs(440 * kMs), 459 * kMs);
}

TEST(CollectiveGateTest, RelearnsWhenThePatternChanges) {
  CollectiveGate g;
  LearnSixtyToNinety(g);
  // The collective moves to [20, 40): two mismatched iterations drop the
  // model (mismatch_limit 2).
  Iteration(g, 300, {{20, 40}}, /*mark=*/false);
  g.IterationBegin(400 * kMs);
  EXPECT_TRUE(g.stats().learned);
  Iteration(g, 400, {{20, 40}}, /*mark=*/false);
  g.IterationBegin(500 * kMs);
  EXPECT_FALSE(g.stats().learned);
  EXPECT_EQ(g.stats().models_dropped, 1u);
  // Meanwhile only actual collectives close the gate.
  EXPECT_TRUE(g.MaySend(560 * kMs));
  Iteration(g, 500, {{20, 40}}, /*mark=*/false);
  Iteration(g, 600, {{20, 40}});
  g.IterationBegin(700 * kMs);
  CollectiveGateStats s = g.stats();
  EXPECT_TRUE(s.learned);
  EXPECT_EQ(s.models_learned, 2u);
  EXPECT_TRUE(g.MaySend(718 * kMs - 1));
  EXPECT_FALSE(g.MaySend(718 * kMs));
  g.CollectiveBegin(720 * kMs);
  g.CollectiveEnd(740 * kMs);
  EXPECT_TRUE(g.MaySend(760 * kMs));
}

TEST(CollectiveGateTest, ToleratesOneStrayCollective) {
  CollectiveGate g;
  LearnSixtyToNinety(g);
  Iteration(g, 300, {{10, 15}, {60, 90}}, /*mark=*/false);
  Iteration(g, 400, {{60, 90}});
  Iteration(g, 500, {{60, 90}});
  g.IterationBegin(600 * kMs);
  EXPECT_TRUE(g.stats().learned);
  EXPECT_EQ(g.stats().models_dropped, 0u);
  EXPECT_FALSE(g.MaySend(660 * kMs));
}

TEST(CollectiveGateTest, CollectiveRunningAcrossTheMarkBelongsToItsStart) {
  CollectiveGate g;
  // Each iteration's collective runs from 90 ms to 10 ms into the next.
  for (int64_t i = 0; i < 8; ++i) {
    g.IterationBegin(i * 100 * kMs);
    if (i > 0) g.CollectiveEnd((i * 100 + 10) * kMs);
    g.CollectiveBegin((i * 100 + 90) * kMs);
    // Learned once the third iteration's collective ended, at 310 ms.
    EXPECT_EQ(g.stats().learned, i >= 3) << i;
  }
  EXPECT_EQ(g.stats().models_dropped, 0u);
  EXPECT_EQ(g.stats().period_ns, 100 * kMs);
  g.CollectiveEnd(810 * kMs);
  EXPECT_TRUE(g.MaySend(810 * kMs));
  EXPECT_EQ(g.OpenUntilNs(810 * kMs), 888 * kMs);
  EXPECT_FALSE(g.MaySend(905 * kMs));
}

TEST(CollectiveGateTest, IrregularPatternNeverLearns) {
  CollectiveGate g;
  const int64_t lengths[] = {100, 150, 80, 120, 100, 170, 90};
  const int64_t offsets[] = {60, 20, 70, 10, 50, 120, 5};
  int64_t t = 0;
  for (int i = 0; i < 7; ++i) {
    Iteration(g, t, {{offsets[i], offsets[i] + 5}});
    t += lengths[i];
  }
  g.IterationBegin(t * kMs);
  EXPECT_FALSE(g.stats().learned);
  EXPECT_TRUE(g.MaySend((t + 60) * kMs));
  EXPECT_EQ(g.OpenUntilNs((t + 60) * kMs), kForever);
  g.CollectiveBegin((t + 61) * kMs);
  EXPECT_FALSE(g.MaySend((t + 62) * kMs));
}

TEST(CollectiveGateTest, QuietJobOpensTheGateAndForgetsTheModel) {
  CollectiveGate g;
  LearnSixtyToNinety(g);
  EXPECT_FALSE(g.MaySend(358 * kMs));
  // Four periods after the last mark (300 ms) the model no longer applies.
  EXPECT_FALSE(g.MaySend(660 * kMs));
  EXPECT_TRUE(g.MaySend(760 * kMs));
  EXPECT_EQ(g.OpenUntilNs(760 * kMs), kForever);
  EXPECT_EQ(g.MaxIdleWindowNs(760 * kMs), kForever);
  g.IterationBegin(1000 * kMs);
  EXPECT_FALSE(g.stats().learned);
  EXPECT_EQ(g.stats().models_dropped, 1u);
}

TEST(CollectiveGateTest, LeakedCollectiveTimesOut) {
  CollectiveGate g;
  g.CollectiveBegin(0);
  EXPECT_FALSE(g.MaySend(5 * kSec));
  EXPECT_EQ(g.NextOpenNs(5 * kSec), 10 * kSec);
  EXPECT_TRUE(g.MaySend(10 * kSec + 1));
  // The next mark starts afresh: the leaked Begin is forgotten.
  g.CollectiveBegin(11 * kSec);
  g.CollectiveEnd(11 * kSec + 10 * kMs);
  EXPECT_TRUE(g.MaySend(11 * kSec + 10 * kMs));
}

TEST(CollectiveGateTest, RecordSendCountsIdleWindows) {
  CollectiveGate g;
  EXPECT_TRUE(g.RecordSend(0));
  EXPECT_FALSE(g.RecordSend(10 * kMs));
  LearnSixtyToNinety(g);
  EXPECT_TRUE(g.RecordSend(310 * kMs));  // collectives happened since
  EXPECT_FALSE(g.RecordSend(340 * kMs));
  EXPECT_FALSE(g.RecordSend(365 * kMs));  // closed: not counted
  g.CollectiveBegin(360 * kMs);
  g.CollectiveEnd(390 * kMs);
  EXPECT_TRUE(g.RecordSend(395 * kMs));
  g.AddYieldNs(7);
  CollectiveGateStats s = g.stats();
  EXPECT_EQ(s.windows, 3u);
  EXPECT_EQ(s.yield_ns, 7);
}

TEST(CollectiveGateTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(CollectiveGateOptions().Validate().ok());
  CollectiveGateOptions o;
  o.tolerance = 0;
  Status s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tolerance"), absl::string_view::npos);
  o = CollectiveGateOptions();
  o.learn_iterations = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagger::qos
