#include "client/memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "client/staging_pool.h"

namespace stagger::client {
namespace {

constexpr uint64_t kChunk = 4 << 20;

TEST(StagingNeeded, WholeChunksTakeSlabsAndTailsTakePieces) {
  EXPECT_EQ(StagingNeeded({}, kChunk), 0u);
  EXPECT_EQ(StagingNeeded({2 * kChunk}, kChunk), 2 * kChunk);
  // A 3 KB tail takes a 4 KiB piece, cut from a slab of its own.
  EXPECT_EQ(StagingNeeded({kChunk + 3000}, kChunk), 2 * kChunk);
  // Two tails of one piece size share the slab they are cut from.
  EXPECT_EQ(StagingNeeded({3000, 4000}, kChunk), kChunk);
  // Pieces of two sizes: a slab each; 1025 pieces of 4 KiB: two slabs.
  EXPECT_EQ(StagingNeeded({3000, 5000}, kChunk), 2 * kChunk);
  EXPECT_EQ(StagingNeeded(std::vector<uint64_t>(1025, 4096), kChunk),
            2 * kChunk);
  // A tail over half a chunk takes a whole slab, and no cut slab.
  EXPECT_EQ(StagingNeeded({kChunk / 2 + 1}, kChunk), kChunk);
}

TEST(StagingNeeded, ATallyKeptAsTensorsComeMatchesAndClears) {
  StagingTally tally(kChunk);
  EXPECT_EQ(tally.Needed(), 0u);
  const std::vector<uint64_t> sizes = {3000, kChunk + 5000, 4000, 3 * kChunk,
                                       kChunk / 2 + 1};
  for (uint64_t b : sizes) tally.Add(b);
  EXPECT_EQ(tally.Needed(), StagingNeeded(sizes, kChunk));
  EXPECT_EQ(tally.Needed(), 7 * kChunk);  // 4 whole + 1 large tail + 2 cut
  tally.Clear();
  EXPECT_EQ(tally.Needed(), 0u);
  tally.Add(kChunk);
  EXPECT_EQ(tally.Needed(), kChunk);
}

TEST(Staging, TheDefaultPoolGrowsWhenFreeAndAFixedOneNever) {
  Staging grows(nullptr, kChunk, "j");
  EXPECT_EQ(grows.pool(), nullptr);
  ASSERT_TRUE(grows.Size(kChunk, /*in_use=*/false).ok());
  ASSERT_NE(grows.pool(), nullptr);
  EXPECT_EQ(grows.pool()->size(), kChunk);
  // Held by another save: not replaced now.
  ASSERT_TRUE(grows.Size(3 * kChunk, /*in_use=*/true).ok());
  EXPECT_EQ(grows.pool()->size(), kChunk);
  ASSERT_TRUE(grows.Size(3 * kChunk, /*in_use=*/false).ok());
  EXPECT_EQ(grows.pool()->size(), 3 * kChunk);
  // Smaller needs keep the larger pool.
  ASSERT_TRUE(grows.Size(kChunk, false).ok());
  EXPECT_EQ(grows.pool()->size(), 3 * kChunk);

  // A need that is not whole slabs (tails in pieces) is rounded up, so
  // the same state saved again keeps the same pool rather than mapping a
  // new one at every save.
  const uint64_t odd = 5 * kChunk + 3 * 4096;
  ASSERT_TRUE(grows.Size(odd, false).ok());
  const StagingPool* made = grows.pool();
  EXPECT_EQ(made->size(), 6 * kChunk);
  ASSERT_TRUE(grows.Size(odd, false).ok());
  EXPECT_EQ(grows.pool(), made);

  auto fixed = StagingPool::Create(2 * kChunk, kChunk);
  ASSERT_TRUE(fixed.ok());
  Staging pinned_size(std::move(*fixed), kChunk, "j");
  ASSERT_TRUE(pinned_size.Size(8 * kChunk, false).ok());
  EXPECT_EQ(pinned_size.pool()->size(), 2 * kChunk);
}

// Resident bytes of this process (/proc/self/statm).
long ResidentBytes() {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f == nullptr || fscanf(f, "%ld %ld", &pages, &resident) != 2) {
    resident = -1;
  }
  if (f != nullptr) fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

// A state of a chunk or less gets a pool of one slab, which costs the
// pages its copies touch (thousands of small ranks in one process): not
// populated, not faulted in by the background preparation. A larger pool
// is faulted in as before.
TEST(StagingPoolTest, OneSlabIsFaultedInByItsCopiesOnly) {
  const long before = ResidentBytes();
  auto one = StagingPool::Create(kChunk, kChunk, /*populate=*/true);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_FALSE((*one)->FaultInNext());
  char* piece = (*one)->Acquire(3000, nullptr);
  ASSERT_NE(piece, nullptr);
  memset(piece, 1, 3000);
  EXPECT_LT(ResidentBytes() - before, long{kChunk} / 4);
  (*one)->Release(piece);

  const long mid = ResidentBytes();
  auto two = StagingPool::Create(2 * kChunk, kChunk, /*populate=*/true);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_GE(ResidentBytes() - mid, long{2 * kChunk} * 9 / 10);
}

}  // namespace
}  // namespace stagger::client
