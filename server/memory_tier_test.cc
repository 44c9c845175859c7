#include "server/memory_tier.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace stagger::server {
namespace {

format::RecordHeader Header(uint64_t id, size_t n) {
  format::RecordHeader h;
  h.chunk_id = format::ChunkId{id, id};
  h.raw_length = n;
  h.encoded_length = n;
  return h;
}

// Holds chunk `id` of `n` bytes of `job`; true when held.
bool Put(MemoryTier& t, uint64_t id, size_t n, const std::string& job = "j") {
  transport::Buffer b(n);
  return t.Hold(job, Header(id, n), std::nullopt, &b);
}

// Writes the next chunk due "to disk" with outcome `s`; returns its id.
uint64_t WriteNext(MemoryTier& t, const Status& s = absl::OkStatus()) {
  auto rec = t.NextToWrite();
  EXPECT_TRUE(rec.has_value());
  if (!rec) return 0;
  t.Written(rec->job, rec->header.chunk_id, s);
  return rec->header.chunk_id.hi;
}

TEST(MemoryTierTest, HeldChunksAreServedAndWrittenInOrder) {
  MemoryTier t(1000);
  ASSERT_TRUE(Put(t, 1, 100));
  ASSERT_TRUE(Put(t, 2, 200));
  auto got = t.Find("j", format::ChunkId{2, 2});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->payload->size(), 200u);
  EXPECT_FALSE(t.Find("other", format::ChunkId{2, 2}).has_value());
  EXPECT_EQ(t.StateOf("j", format::ChunkId{1, 1}),
            MemoryTier::State::kMemoryOnly);
  EXPECT_EQ(WriteNext(t), 1u);
  EXPECT_EQ(t.StateOf("j", format::ChunkId{1, 1}), MemoryTier::State::kOnDisk);
  MemoryTier::Stats s = t.stats();
  EXPECT_EQ(s.bytes, 300u);
  EXPECT_EQ(s.memory_only_bytes, 200u);
  EXPECT_EQ(s.jobs["j"].memory_only_bytes, 200u);
  EXPECT_EQ(s.reads_total, 1u);
}

TEST(MemoryTierTest, OnlyChunksOnDiskAreEvictedLeastRecentlyUsedFirst) {
  MemoryTier t(300);
  ASSERT_TRUE(Put(t, 1, 100));
  ASSERT_TRUE(Put(t, 2, 100));
  ASSERT_TRUE(Put(t, 3, 100));
  // Full of memory-only chunks: a fourth does not fit, and nothing held
  // is dropped for it.
  transport::Buffer b(100);
  EXPECT_FALSE(t.Hold("j", Header(4, 100), std::nullopt, &b));
  EXPECT_EQ(b.size(), 100u) << "a refused payload stays with the caller";
  EXPECT_EQ(t.stats().refused_total, 1u);
  EXPECT_EQ(WriteNext(t), 1u);
  EXPECT_EQ(WriteNext(t), 2u);
  // 1 read since: 2 is the least recently used chunk on disk.
  ASSERT_TRUE(t.Find("j", format::ChunkId{1, 1}).has_value());
  ASSERT_TRUE(Put(t, 4, 100));
  EXPECT_EQ(t.StateOf("j", format::ChunkId{2, 2}), MemoryTier::State::kAbsent);
  EXPECT_EQ(t.StateOf("j", format::ChunkId{1, 1}), MemoryTier::State::kOnDisk);
  EXPECT_EQ(t.StateOf("j", format::ChunkId{3, 3}),
            MemoryTier::State::kMemoryOnly);
  EXPECT_EQ(t.stats().evicted_total, 1u);
  // Bigger than everything evictable frees: refused without evicting.
  EXPECT_FALSE(Put(t, 5, 250));
  EXPECT_EQ(t.StateOf("j", format::ChunkId{1, 1}), MemoryTier::State::kOnDisk);
  EXPECT_FALSE(Put(t, 6, 301)) << "bigger than the tier";
}

TEST(MemoryTierTest, AChunkHeldAgainAfterItWasWrittenIsWrittenAgain) {
  // The caller holds again only what no index has: a gc deleted the copy
  // on disk meanwhile.
  MemoryTier t(1000);
  ASSERT_TRUE(Put(t, 1, 100));
  EXPECT_EQ(WriteNext(t), 1u);
  ASSERT_TRUE(Put(t, 1, 100));
  EXPECT_EQ(t.StateOf("j", format::ChunkId{1, 1}),
            MemoryTier::State::kMemoryOnly);
  EXPECT_EQ(t.stats().memory_only_bytes, 100u);
  EXPECT_EQ(t.stats().bytes, 100u);
  // Not evictable until written again.
  EXPECT_FALSE(Put(t, 2, 950));
  EXPECT_EQ(WriteNext(t), 1u);
  EXPECT_TRUE(Put(t, 2, 950));
  EXPECT_EQ(t.StateOf("j", format::ChunkId{1, 1}), MemoryTier::State::kAbsent);
}

TEST(MemoryTierTest, AFailedWriteKeepsTheChunkAndTriesAgain) {
  MemoryTier t(1000);
  ASSERT_TRUE(Put(t, 1, 100));
  EXPECT_EQ(WriteNext(t, absl::ResourceExhaustedError("disk full")), 1u);
  EXPECT_EQ(t.StateOf("j", format::ChunkId{1, 1}),
            MemoryTier::State::kMemoryOnly);
  Status waited = t.WaitWritten("j", {format::ChunkId{1, 1}},
                                absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
  EXPECT_NE(waited.message().find("disk full"), std::string::npos) << waited;
  // Due again after the retry delay.
  const absl::Time start = absl::Now();
  EXPECT_EQ(WriteNext(t), 1u);
  EXPECT_GE(absl::Now() - start,
            MemoryTier::kRetryDelay - absl::Milliseconds(50));
  EXPECT_TRUE(t.WaitWritten("j", {format::ChunkId{1, 1}}, absl::Now()).ok());
  EXPECT_EQ(t.stats().write_failures_total, 1u);
}

TEST(MemoryTierTest, WaitersWakeWhenTheWriteBehindCatchesUp) {
  MemoryTier t(1000, absl::Milliseconds(100));
  ASSERT_TRUE(Put(t, 1, 10));
  ASSERT_TRUE(Put(t, 2, 10, "k"));
  std::thread writer([&] {
    WriteNext(t);
    WriteNext(t);
  });
  EXPECT_TRUE(t.WaitJobWritten("j", absl::Now() + absl::Seconds(10)).ok());
  EXPECT_TRUE(t.WaitWritten("k", {format::ChunkId{2, 2}},
                            absl::Now() + absl::Seconds(10))
                  .ok());
  writer.join();
  // A chunk a plain put stored needs no write behind.
  ASSERT_TRUE(Put(t, 3, 10));
  t.StoredElsewhere("j", format::ChunkId{3, 3});
  EXPECT_TRUE(t.WaitJobWritten("j", absl::Now()).ok());
  t.Stop();
  EXPECT_FALSE(t.NextToWrite().has_value());
}

}  // namespace
}  // namespace stagger::server
