#include "client/spare_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "client/memory.h"

namespace stagger::client {
namespace {

constexpr uint64_t kSlab = 1 << 20;

std::unique_ptr<StagingPool> Pool(uint64_t slabs) {
  auto p = StagingPool::Create(slabs * kSlab, kSlab);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// Empties the process's spare between cases.
void Drain() {
  while (SparePool::Take(0, ~0ull, kSlab) != nullptr) {
  }
}

TEST(SparePool, ANewCheckpointersStagingTakesTheLastOnesPool) {
  Drain();
  const StagingPool* first;
  {
    Staging a(nullptr, kSlab, "a");
    ASSERT_TRUE(a.Size(3 * kSlab, /*in_use=*/false).ok());
    first = a.pool();
    // A save cut a slab into pieces and gave them back.
    char* piece = first == nullptr ? nullptr : a.pool()->Acquire(4096, nullptr);
    ASSERT_NE(piece, nullptr);
    a.pool()->Release(piece);
  }
  EXPECT_EQ(SparePool::ParkedBytes(), 3 * kSlab);
  Staging b(nullptr, kSlab, "b");
  ASSERT_TRUE(b.Size(2 * kSlab, false).ok());
  EXPECT_EQ(b.pool(), first) << "the parked pool, not a new mapping";
  EXPECT_EQ(SparePool::ParkedBytes(), 0u);
  // Whole again: every slab can be taken whole.
  for (int i = 0; i < 3; ++i) EXPECT_NE(b.pool()->TryAcquire(), nullptr) << i;
  EXPECT_EQ(b.pool()->TryAcquire(), nullptr);
}

TEST(SparePool, TakesOnlyAPoolOfTheSlabSizeWithinTheBounds) {
  Drain();
  SparePool::Park(Pool(4));
  EXPECT_EQ(SparePool::Take(5 * kSlab, ~0ull, kSlab), nullptr) << "too small";
  EXPECT_EQ(SparePool::Take(0, 3 * kSlab, kSlab), nullptr) << "over the cap";
  EXPECT_EQ(SparePool::Take(0, ~0ull, 2 * kSlab), nullptr) << "other slabs";
  EXPECT_EQ(SparePool::ParkedBytes(), 4 * kSlab) << "still parked";
  auto p = SparePool::Take(4 * kSlab, 4 * kSlab, kSlab);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->size(), 4 * kSlab);
}

TEST(SparePool, KeepsTheLargestOfTwo) {
  Drain();
  SparePool::Park(Pool(4));
  SparePool::Park(Pool(2));
  EXPECT_EQ(SparePool::ParkedBytes(), 4 * kSlab);
  SparePool::Park(Pool(5));
  EXPECT_EQ(SparePool::ParkedBytes(), 5 * kSlab);
  Drain();
}

TEST(SparePool, APoolNobodyTakesIsUnmappedAfterItsKeep) {
  Drain();
  SparePool::Park(Pool(2), std::chrono::milliseconds(20));
  EXPECT_EQ(SparePool::ParkedBytes(), 2 * kSlab);
  // Waits for the timer thread (an event, not a timing: 30 s is only the
  // bound on a stuck timer).
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (SparePool::ParkedBytes() != 0 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(SparePool::ParkedBytes(), 0u);
  // A long keep is not cut short by the one before it: the timer waits for
  // the new pool's expiry, an hour away.
  SparePool::Park(Pool(1), std::chrono::hours(1));
  give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (SparePool::TimerWaitLeft() < std::chrono::minutes(59) &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(SparePool::TimerWaitLeft(), std::chrono::minutes(59));
  EXPECT_EQ(SparePool::ParkedBytes(), kSlab);
  Drain();
}

TEST(StagingPoolReset, RefusedWhileAnythingIsAcquired) {
  auto p = Pool(2);
  char* s = p->Acquire(nullptr);
  EXPECT_EQ(p->Reset().code(), absl::StatusCode::kFailedPrecondition);
  p->Release(s);
  EXPECT_TRUE(p->Reset().ok());
  EXPECT_EQ(p->peak_bytes(), 0u);
}

}  // namespace
}  // namespace stagger::client
