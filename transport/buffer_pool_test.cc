#include "transport/buffer_pool.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace stagger::transport {
namespace {

TEST(BufferPoolTest, ReusesFreedBlocksWithTheirLayout) {
  auto pool = BufferPool::Create(16 << 20);
  const char* first = nullptr;
  {
    Buffer b = pool->Get(4 << 20, 64);
    EXPECT_EQ(b.size(), 4u << 20);
    EXPECT_EQ(b.headroom(), 64u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data() - 64) % Buffer::kAlignment,
              0u);
    // The block is whole 64 KiB granules: room for the bytes and more.
    EXPECT_EQ((b.headroom() + b.capacity()) % BufferPool::kGranule, 0u);
    EXPECT_GE(b.capacity(), b.size());
    std::memset(b.data(), 7, b.size());
    first = b.data();
  }
  EXPECT_EQ(pool->stats().cached_bytes, (4u << 20) + BufferPool::kGranule);
  // A slightly smaller request takes the same block back.
  Buffer again = pool->Get((4 << 20) - 1000, 64);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool->stats().reused, 1u);
  EXPECT_EQ(pool->stats().mapped, 1u);
  EXPECT_EQ(pool->stats().cached_bytes, 0u);
  // A much smaller one does not (it would waste most of the block).
  Buffer small = pool->Get(1 << 20);
  EXPECT_EQ(pool->stats().mapped, 2u);
}

TEST(BufferPoolTest, KeepsNoMoreThanItsBound) {
  auto pool = BufferPool::Create(8 << 20);
  {
    Buffer a = pool->Get(3 << 20);
    Buffer b = pool->Get(3 << 20);
    Buffer c = pool->Get(3 << 20);
  }
  // Two 3 MiB blocks fit in 8 MiB; the third was unmapped.
  EXPECT_EQ(pool->stats().cached_bytes, 6u << 20);
}

TEST(BufferPoolTest, SmallRequestsAreOrdinaryBuffersAndBuffersOutliveThePool) {
  auto pool = BufferPool::Create(8 << 20);
  Buffer tiny = pool->Get(100, 64);
  EXPECT_EQ(tiny.size(), 100u);
  EXPECT_EQ(pool->stats().mapped, 0u);
  Buffer big = pool->Get(2 << 20);
  std::weak_ptr<BufferPool> weak = pool;
  pool.reset();
  EXPECT_FALSE(weak.expired());  // the buffer keeps it
  std::memset(big.data(), 1, big.size());
  big = Buffer();
  EXPECT_TRUE(weak.expired());
}

// Prefill maps blocks for one payload size until the cache holds the
// bytes asked (never past its bound, stopping when told); Gets of that
// size then map nothing.
TEST(BufferPoolTest, PrefillMakesLaterGetsMapNothing) {
  const size_t size = 256 << 10, headroom = 64;
  const size_t block = 256 << 10 | 64 << 10;  // rounded up to 64 KiB
  auto pool = BufferPool::Create(4 * block);
  EXPECT_EQ(pool->Prefill(3 * block, size, headroom), 3u);
  EXPECT_EQ(pool->stats().prefilled, 3u);
  EXPECT_EQ(pool->stats().cached_bytes, 3 * block);
  EXPECT_EQ(pool->Prefill(100 * block, size, headroom), 1u);  // the bound
  std::vector<Buffer> held;
  for (int i = 0; i < 4; ++i) held.push_back(pool->Get(size, headroom));
  EXPECT_EQ(pool->stats().mapped, 0u);
  EXPECT_EQ(pool->stats().reused, 4u);
  held.push_back(pool->Get(size, headroom));
  EXPECT_EQ(pool->stats().mapped, 1u);

  std::atomic<bool> stop{true};
  auto other = BufferPool::Create(4 * block);
  EXPECT_EQ(other->Prefill(4 * block, size, headroom, &stop), 0u);
  EXPECT_EQ(other->Prefill(4 * block, 1000, 0), 0u);  // small: not pooled
}

TEST(BufferTest, DropFrontMovesTheStartIntoTheHeadroomWithoutACopy) {
  Buffer b(10000);
  std::memset(b.data(), 'h', 64);
  std::memset(b.data() + 64, 'p', b.size() - 64);
  const char* payload = b.data() + 64;
  const size_t end = b.headroom() + b.capacity();
  b.DropFront(64);
  EXPECT_EQ(b.data(), payload);
  EXPECT_EQ(b.size(), 10000u - 64);
  EXPECT_EQ(b.headroom(), 64u);
  EXPECT_EQ(b.headroom() + b.capacity(), end);
  EXPECT_EQ(b.view(), std::string(10000 - 64, 'p'));
  b.DropFront(1 << 20);  // more than it holds: empties it
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.headroom() + b.capacity(), end);
}

}  // namespace
}  // namespace stagger::transport
