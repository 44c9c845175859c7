// The device staging ring's space accounting; no device needed.
#include "client/cuda/internal/ring_allocator.h"

#include <gtest/gtest.h>

namespace stagger::client_internal {
namespace {

TEST(RingAllocator, AllocatesInOrderAndAligns) {
  RingAllocator ring(4096, 256);
  EXPECT_EQ(ring.Allocate(100), 0u);
  EXPECT_EQ(ring.Allocate(256), 256u);
  EXPECT_EQ(ring.Allocate(1), 512u);
  EXPECT_EQ(ring.in_use(), 768u);
  EXPECT_EQ(ring.allocations(), 3u);
}

TEST(RingAllocator, RefusesWhatDoesNotFit) {
  RingAllocator ring(1024, 256);
  EXPECT_FALSE(ring.Allocate(0).has_value());
  EXPECT_FALSE(ring.Allocate(1025).has_value());
  EXPECT_EQ(ring.Allocate(1024), 0u);
  EXPECT_FALSE(ring.Allocate(1).has_value());
  ring.FreeOldest();
  EXPECT_EQ(ring.in_use(), 0u);
  EXPECT_EQ(ring.Allocate(1024), 0u);
}

TEST(RingAllocator, WrapsToTheStartWhenTheOldestIsFreed) {
  RingAllocator ring(1024, 256);
  EXPECT_EQ(ring.Allocate(512), 0u);
  EXPECT_EQ(ring.Allocate(256), 512u);
  // [768, 1024) is free but 512 bytes do not fit there, nor before 0.
  EXPECT_FALSE(ring.Allocate(512).has_value());
  ring.FreeOldest();  // frees [0, 512)
  // Wraps: skips [768, 1024) and takes [0, 512).
  EXPECT_EQ(ring.Allocate(512), 0u);
  EXPECT_EQ(ring.in_use(), 256u + 512u + 256u);
  // Wrapped: only [512, 512) is free now, i.e. nothing.
  EXPECT_FALSE(ring.Allocate(256).has_value());
  ring.FreeOldest();  // frees [512, 768)
  // Live is [0, 512) alone; [512, 1024) is free again.
  EXPECT_EQ(ring.Allocate(512), 512u);
  ring.FreeOldest();
  ring.FreeOldest();
  EXPECT_EQ(ring.in_use(), 0u);
  EXPECT_EQ(ring.allocations(), 0u);
}

TEST(RingAllocator, FillsTheGapBeforeTheOldestWhenWrapped) {
  RingAllocator ring(1024, 256);
  ASSERT_EQ(ring.Allocate(256), 0u);
  ASSERT_EQ(ring.Allocate(256), 256u);
  ASSERT_EQ(ring.Allocate(512), 512u);
  ring.FreeOldest();
  ring.FreeOldest();  // live: [512, 1024)
  EXPECT_EQ(ring.Allocate(256), 0u);
  EXPECT_EQ(ring.Allocate(256), 256u);
  EXPECT_FALSE(ring.Allocate(1).has_value());
}

TEST(RingAllocator, NeverHandsOutOverlappingLiveSpace) {
  // A FIFO workload of mixed sizes, checked against a byte map of owners.
  constexpr uint64_t kCap = 1 << 14;
  RingAllocator ring(kCap, 256);
  std::vector<int> owner(kCap, -1);
  struct Live {
    uint64_t offset, len;
    int id;
  };
  std::deque<Live> live;
  uint32_t x = 12345;
  for (int id = 0; id < 5000; ++id) {
    x = x * 1664525u + 1013904223u;
    const uint64_t len = 1 + (x >> 8) % 5000;
    auto offset = ring.Allocate(len);
    if (!offset) {
      ASSERT_FALSE(live.empty()) << "an empty ring refused " << len;
      for (uint64_t i = 0; i < live.front().len; ++i) {
        owner[live.front().offset + i] = -1;
      }
      live.pop_front();
      ring.FreeOldest();
      continue;
    }
    ASSERT_EQ(*offset % 256, 0u);
    ASSERT_LE(*offset + len, kCap);
    for (uint64_t i = 0; i < len; ++i) {
      ASSERT_EQ(owner[*offset + i], -1) << "overlap at " << *offset + i;
      owner[*offset + i] = id;
    }
    live.push_back({*offset, len, id});
  }
}

}  // namespace
}  // namespace stagger::client_internal
