#include "qos/internal/gate_model.h"

#include <gtest/gtest.h>

namespace stagger::qos_internal {
namespace {

TEST(GateModelTest, FloorDivRoundsDown) {
  EXPECT_EQ(FloorDiv(7, 2), 3);
  EXPECT_EQ(FloorDiv(-7, 2), -4);
  EXPECT_EQ(FloorDiv(-8, 2), -4);
  EXPECT_EQ(FloorDiv(0, 5), 0);
}

TEST(GateModelTest, FitsAgreeingIterationsConservatively) {
  std::vector<Iteration> iters = {
      {100, {{60, 90}}}, {104, {{62, 88}}}, {96, {{58, 91}}}};
  std::optional<GateModel> m = FitIterations(iters, 0.1);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->period_ns, 100);
  ASSERT_EQ(m->phases.size(), 1u);
  EXPECT_EQ(m->phases[0].begin_ns, 58);
  EXPECT_EQ(m->phases[0].end_ns, 91);
}

TEST(GateModelTest, RejectsDisagreeingIterations) {
  // Lengths off by more than 10%.
  auto fits = [](std::vector<Iteration> iters) {
    return FitIterations(iters, 0.1).has_value();
  };
  EXPECT_FALSE(fits({{100, {{60, 90}}}, {130, {{60, 90}}}}));
  // Different numbers of collectives.
  EXPECT_FALSE(fits({{100, {{60, 90}}}, {100, {{10, 20}, {60, 90}}}}));
  // Begins too far apart.
  EXPECT_FALSE(fits({{100, {{60, 90}}}, {100, {{75, 90}}}}));
  // No collective at all, or a collective as long as the period.
  EXPECT_FALSE(fits({{100, {}}, {100, {}}}));
  EXPECT_FALSE(fits({{100, {{0, 100}}}}));
  EXPECT_FALSE(fits({}));
}

TEST(GateModelTest, SplitsSpansByMarks) {
  std::deque<int64_t> marks = {0, 100, 200};
  std::deque<Span> spans = {{60, 90}, {150, 170}, {195, 210}, {230, 240}};
  std::vector<Iteration> iters = SplitByMarks(marks, spans);
  ASSERT_EQ(iters.size(), 2u);
  EXPECT_EQ(iters[0].length_ns, 100);
  ASSERT_EQ(iters[0].busy.size(), 1u);
  EXPECT_EQ(iters[0].busy[0].begin_ns, 60);
  ASSERT_EQ(iters[1].busy.size(), 2u);
  EXPECT_EQ(iters[1].busy[0].begin_ns, 50);
  EXPECT_EQ(iters[1].busy[1].end_ns, 110);  // straddles the next mark
}

TEST(GateModelTest, RecurrenceFindsTheNumberOfCollectivesPerIteration) {
  std::deque<Span> spans;
  for (int64_t i = 0; i < 4; ++i) {
    spans.push_back({i * 100 + 20, i * 100 + 30});
    spans.push_back({i * 100 + 60, i * 100 + 90});
  }
  spans.pop_back();  // ends with the first collective of iteration 3
  std::optional<GateModel> m = FitRecurrence(spans, 3, 8, 0.1);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->period_ns, 100);
  ASSERT_EQ(m->phases.size(), 2u);
  EXPECT_EQ(m->phases[0].begin_ns, 0);
  EXPECT_EQ(m->phases[0].end_ns, 10);
  EXPECT_EQ(m->phases[1].begin_ns, 40);
  EXPECT_EQ(m->phases[1].end_ns, 70);
  // Too few spans for three iterations.
  spans.pop_front();
  EXPECT_FALSE(FitRecurrence(spans, 3, 8, 0.1).has_value());
}

TEST(GateModelTest, MaxIdleWindowIncludesTheWrapAround) {
  GateModel m{100, {{20, 30}, {60, 70}}};
  // Gaps: 30 -> 58 (28) and 70 -> 118 (48).
  EXPECT_EQ(MaxIdleWindowNs(m, 2), 48);
  // A guard that swallows the period leaves no idle time.
  EXPECT_LE(MaxIdleWindowNs(m, 60), 0);
}

}  // namespace
}  // namespace stagger::qos_internal
