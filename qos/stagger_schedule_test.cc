#include "qos/stagger_schedule.h"

#include <gtest/gtest.h>

#include <set>

#include "qos/clock.h"

namespace stagger::qos {
namespace {

StaggerSlot SlotOf(int rank, int world, int per_node, int64_t window,
                   double spread = 0.5) {
  StaggerOptions o;
  o.rank = rank;
  o.world_size = world;
  o.ranks_per_node = per_node;
  o.window_ns = window;
  o.spread = spread;
  Result<StaggerSlot> slot = ComputeStaggerSlot(o);
  EXPECT_TRUE(slot.ok()) << slot.status();
  return slot.ok() ? *slot : StaggerSlot{};
}

TEST(StaggerScheduleTest, SingleRankStartsAtOnceAndUsesTheWindow) {
  StaggerSlot s = SlotOf(0, 1, 8, kSec);
  EXPECT_EQ(s.start_offset_ns, 0);
  EXPECT_EQ(s.deadline_offset_ns, kSec);
}

TEST(StaggerScheduleTest, FollowsTheFormula) {
  // 4 nodes of 4 ranks, spread 0.5 of 1 s: 16 slots of 31.25 ms.
  StaggerSlot s = SlotOf(5, 16, 4, kSec);
  EXPECT_EQ(s.start_offset_ns, 156'250'000);
  // Last start 468.75 ms, so every rank gets 531.25 ms.
  EXPECT_EQ(s.deadline_offset_ns, 156'250'000 + 531'250'000);
  StaggerSlot last = SlotOf(15, 16, 4, kSec);
  EXPECT_EQ(last.start_offset_ns, 468'750'000);
  EXPECT_EQ(last.deadline_offset_ns, kSec);
}

TEST(StaggerScheduleTest, PartialLastNodeKeepsNodeSlots) {
  // 10 ranks, 4 per node: 3 nodes, slots of 500 / 3 ms.
  EXPECT_EQ(SlotOf(8, 10, 4, kSec).start_offset_ns, 333'333'333);
  EXPECT_EQ(SlotOf(9, 10, 4, kSec).start_offset_ns, 375'000'000);
  EXPECT_EQ(SlotOf(9, 10, 4, kSec).deadline_offset_ns, kSec);
}

TEST(StaggerScheduleTest, NodesGetDistinctSlotsAndOffsetsStayInRange) {
  const int world = 64, per_node = 8, nodes = 8;
  const int64_t window = 10 * kSec;
  const int64_t span = 5 * kSec;
  std::set<int64_t> starts;
  for (int r = 0; r < world; ++r) {
    StaggerSlot s = SlotOf(r, world, per_node, window);
    const int node = r / per_node;
    EXPECT_GE(s.start_offset_ns, node * span / nodes) << r;
    EXPECT_LT(s.start_offset_ns, (node + 1) * span / nodes) << r;
    EXPECT_LE(s.deadline_offset_ns, window) << r;
    EXPECT_GT(s.deadline_offset_ns, s.start_offset_ns) << r;
    starts.insert(s.start_offset_ns);
  }
  EXPECT_EQ(starts.size(), static_cast<size_t>(world));
  // Same duration for everybody.
  EXPECT_EQ(SlotOf(0, world, per_node, window).deadline_offset_ns,
            SlotOf(63, world, per_node, window).deadline_offset_ns -
                SlotOf(63, world, per_node, window).start_offset_ns);
}

TEST(StaggerScheduleTest, SpreadZeroStartsEverybodyTogether) {
  StaggerSlot s = SlotOf(7, 16, 4, kSec, 0.0);
  EXPECT_EQ(s.start_offset_ns, 0);
  EXPECT_EQ(s.deadline_offset_ns, kSec);
  StaggerSlot full = SlotOf(15, 16, 4, kSec, 1.0);
  EXPECT_EQ(full.start_offset_ns, 937'500'000);
  EXPECT_EQ(full.deadline_offset_ns, kSec);
}

TEST(StaggerScheduleTest, HugeValuesDoNotOverflow) {
  const int64_t window = int64_t{1} << 62;
  StaggerSlot s = SlotOf(999'999, 1'000'000, 8, window, 1.0);
  EXPECT_GT(s.start_offset_ns, 0);
  EXPECT_LT(s.start_offset_ns, window);
  EXPECT_EQ(s.deadline_offset_ns, window);
}

TEST(StaggerScheduleTest, RejectsBadInput) {
  StaggerOptions o;
  o.window_ns = kSec;
  o.world_size = 4;
  o.rank = 4;
  EXPECT_EQ(ComputeStaggerSlot(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.rank = 0;
  o.ranks_per_node = 0;
  EXPECT_EQ(ComputeStaggerSlot(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.ranks_per_node = 1;
  o.spread = 1.5;
  EXPECT_EQ(ComputeStaggerSlot(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.spread = 0.5;
  o.window_ns = -1;
  EXPECT_EQ(ComputeStaggerSlot(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.window_ns = 10 * kMs;
  EXPECT_TRUE(ComputeStaggerSlot(o).ok());
}

}  // namespace
}  // namespace stagger::qos
