// Rebaser over real stores (RocksDB and segments in a temp dir): what each
// rebase writes and indexes, that every version still decodes bit-exact,
// keyframes, and the all-or-nothing index update.
#include "server/rebaser.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "server/testing/indexed_stores.h"

namespace stagger::server {
namespace {

using server_internal::BytesOf;

constexpr char kRebasedJob[] = "job";
constexpr size_t kFloats = 16384;  // 64 KiB chunks

class RebaserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(stores_.Open());
    meta_ = stores_.meta();
    segments_ = stores_.segments();
  }
  void TearDown() override { stores_.Close(); }

  // Stores `raw` whole (`codec`) or as a delta (`codec` IsDelta) against
  // `base`, and indexes it as the data service does.
  format::ChunkId Put(const std::vector<float>& raw, format::Codec codec,
                      const std::vector<float>* base = nullptr) {
    return stores_.Put(kRebasedJob, BytesOf(raw), codec,
                       base != nullptr ? BytesOf(*base) : std::string_view());
  }

  // Decodes chunk `id` through the index and compares it with `want`.
  void ExpectDecodes(const format::ChunkId& id,
                     const std::vector<float>& want) {
    auto m = meta_->GetChunk(kRebasedJob, id);
    ASSERT_TRUE(m.ok()) << m.status();
    std::vector<float> got(want.size());
    Status s = DecodeStoredChunk(meta_, segments_, kRebasedJob, id, *m,
                                 reinterpret_cast<char*>(got.data()));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
  }

  server_internal::IndexedStores stores_;
  MetaStore* meta_ = nullptr;
  SegmentStore* segments_ = nullptr;
};

std::vector<float> Weights(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(kFloats);
  for (float& x : w) x = d(rng);
  return w;
}

// 2% of the values move a little: a sparse update.
std::vector<float> Step(std::vector<float> w, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t k = 0; k < kFloats / 50; ++k) w[rng() % kFloats] += 1e-3f;
  return w;
}

TEST_F(RebaserTest, TheNewestBecomesWholeAndItsBaseADeltaOfIt) {
  for (format::Codec delta : {format::Codec::kXorByteGroupZstd,
                              format::Codec::kNumDeltaByteGroupZstd}) {
    SCOPED_TRACE(format::CodecName(delta));
    const std::vector<float> v0 = Weights(static_cast<uint32_t>(delta));
    const std::vector<float> v1 = Step(v0, 1);
    const format::ChunkId b = Put(v0, format::Codec::kByteGroupZstd);
    const format::ChunkId y = Put(v1, delta, &v0);
    const uint64_t whole_size = meta_->GetChunk(kRebasedJob, b)->stored_length;
    Rebaser rebaser(segments_, meta_);
    ASSERT_TRUE(rebaser.RebaseOne(kRebasedJob, y).ok());
    auto ym = meta_->GetChunk(kRebasedJob, y);
    auto bm = meta_->GetChunk(kRebasedJob, b);
    ASSERT_TRUE(ym.ok() && bm.ok());
    // Y whole, in its base's codec; B a delta of Y, smaller than whole.
    EXPECT_EQ(ym->codec, format::Codec::kByteGroupZstd);
    EXPECT_FALSE(ym->base.has_value());
    EXPECT_EQ(ym->behind_hops, 1u);
    EXPECT_EQ(ym->behind_bytes, bm->stored_length);
    EXPECT_EQ(bm->codec, delta);
    ASSERT_TRUE(bm->base.has_value());
    EXPECT_EQ(*bm->base, y);
    EXPECT_LT(bm->stored_length * 4, whole_size);
    ExpectDecodes(y, v1);
    ExpectDecodes(b, v0);
    // Nothing left to do: a second rebase changes nothing.
    ASSERT_TRUE(rebaser.RebaseOne(kRebasedJob, y).ok());
    EXPECT_EQ(meta_->GetChunk(kRebasedJob, b)->location, bm->location);
    RebaserStats st = rebaser.Stats();
    EXPECT_EQ(st.rebased, 1u);
    EXPECT_GT(st.bytes_written, whole_size);
  }
}

TEST_F(RebaserTest, AKeyframeStaysWholeEveryMaxBehindHops) {
  RebaserOptions o;
  o.max_behind_hops = 2;
  Rebaser rebaser(segments_, meta_, o);
  std::vector<std::vector<float>> v{Weights(3)};
  std::vector<format::ChunkId> ids{Put(v[0], format::Codec::kRaw)};
  for (uint32_t i = 1; i <= 4; ++i) {
    v.push_back(Step(v.back(), i));
    ids.push_back(Put(v[i], format::Codec::kXorByteGroupZstd, &v[i - 1]));
    // The worker's path: queued, then done.
    rebaser.Enqueue(kRebasedJob, ids[i]);
    rebaser.WaitIdle();
  }
  // v0 <- v1 <- v2 (kept whole: a third link would pass 2), v3 <- v4.
  RebaserStats st = rebaser.Stats();
  EXPECT_EQ(st.rebased, 3u);
  EXPECT_EQ(st.keyframes, 1u);
  EXPECT_EQ(st.failed + st.aborted + st.dropped, 0u);
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, ids[0])->base, ids[1]);
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, ids[1])->base, ids[2]);
  EXPECT_FALSE(meta_->GetChunk(kRebasedJob, ids[2])->base.has_value());
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, ids[3])->base, ids[4]);
  EXPECT_FALSE(meta_->GetChunk(kRebasedJob, ids[4])->base.has_value());
  for (size_t i = 0; i < v.size(); ++i) ExpectDecodes(ids[i], v[i]);
}

TEST_F(RebaserTest, ADeltaOfADeltaIsDecodedThroughItsChain) {
  // Two versions came before a rebase could run (or one was dropped):
  // v2 -> v1 -> v0. v2 is written whole; v1 stays a delta of v0.
  const std::vector<float> v0 = Weights(5), v1 = Step(v0, 1), v2 = Step(v1, 2);
  const format::ChunkId a = Put(v0, format::Codec::kRaw);
  const format::ChunkId b = Put(v1, format::Codec::kXorByteGroupZstd, &v0);
  const format::ChunkId c = Put(v2, format::Codec::kXorByteGroupZstd, &v1);
  Rebaser rebaser(segments_, meta_);
  ASSERT_TRUE(rebaser.RebaseOne(kRebasedJob, c).ok());
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, c)->codec, format::Codec::kRaw);
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, b)->base, a);
  EXPECT_EQ(rebaser.Stats().keyframes, 1u);
  ExpectDecodes(a, v0);
  ExpectDecodes(b, v1);
  ExpectDecodes(c, v2);
}

TEST_F(RebaserTest, RestoreIsAllOrNothing) {
  const std::vector<float> v0 = Weights(7), v1 = Step(v0, 1);
  const format::ChunkId b = Put(v0, format::Codec::kRaw);
  const format::ChunkId y = Put(v1, format::Codec::kXorByteGroupZstd, &v0);
  ChunkMeta bm = *meta_->GetChunk(kRebasedJob, b),
            ym = *meta_->GetChunk(kRebasedJob, y);
  ChunkMeta moved = ym;
  moved.location.offset += 4096;
  ChunkLocation stale = bm.location;
  stale.offset += 8192;
  // The second entry is no longer where the caller read it.
  Status s =
      meta_->Restore(kRebasedJob, {{y, ym.location, moved}, {b, stale, bm}});
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, y)->location, ym.location);
  // A collected chunk aborts too.
  const format::ChunkId gone = format::ChunkId::Of("x", 1);
  s = meta_->Restore(kRebasedJob, {{gone, bm.location, bm}});
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  // Both unchanged: applied, written time kept.
  ASSERT_TRUE(meta_->Restore(kRebasedJob, {{y, ym.location, moved}}).ok());
  auto now = meta_->GetChunk(kRebasedJob, y);
  EXPECT_EQ(now->location, moved.location);
  EXPECT_EQ(now->written_unix_ms, ym.written_unix_ms);
}

// What a client sent raw (its encoder the bottleneck) the server encodes:
// Y, put whole and raw naming B as its previous version, stays as it came
// and B becomes a delta of Y; both decode bit-exact. Nothing is
// done for a previous version not held here, one of another length, or Y
// a delta.
TEST_F(RebaserTest, AWholePutIsEncodedAndItsPreviousVersionADeltaOfIt) {
  const std::vector<float> v0 = Weights(7);
  const std::vector<float> v1 = Step(v0, 2);
  const format::ChunkId b = Put(v0, format::Codec::kRaw);
  const format::ChunkId y = Put(v1, format::Codec::kRaw);
  const uint64_t raw_size = kFloats * 4;
  Rebaser rebaser(segments_, meta_);
  ASSERT_TRUE(rebaser.RebaseWhole(kRebasedJob, y, b, 4).ok());
  auto ym = meta_->GetChunk(kRebasedJob, y);
  auto bm = meta_->GetChunk(kRebasedJob, b);
  ASSERT_TRUE(ym.ok() && bm.ok());
  EXPECT_EQ(ym->codec, format::Codec::kRaw);
  EXPECT_FALSE(ym->base.has_value());
  EXPECT_EQ(ym->behind_hops, 1u);
  ASSERT_TRUE(bm->base.has_value());
  EXPECT_EQ(*bm->base, y);
  EXPECT_TRUE(format::IsDelta(bm->codec));
  EXPECT_LT(bm->stored_length * 4, raw_size);
  ExpectDecodes(y, v1);
  ExpectDecodes(b, v0);
  EXPECT_EQ(rebaser.Stats().rebased, 1u);
  // Again: B is a delta already, so nothing changes.
  ASSERT_TRUE(rebaser.RebaseWhole(kRebasedJob, y, b, 4).ok());
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, b)->location, bm->location);
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, y)->location, ym->location);

  // A previous version not held here, or of another length: nothing.
  const std::vector<float> v2 = Step(v1, 3);
  const format::ChunkId z = Put(v2, format::Codec::kRaw);
  const auto zm = meta_->GetChunk(kRebasedJob, z);
  ASSERT_TRUE(zm.ok());
  ASSERT_TRUE(
      rebaser.RebaseWhole(kRebasedJob, z, format::ChunkId::Of("absent", 6), 4)
          .ok());
  const std::vector<float> short_one(kFloats / 2, 1.0f);
  const format::ChunkId s = Put(short_one, format::Codec::kRaw);
  ASSERT_TRUE(rebaser.RebaseWhole(kRebasedJob, z, s, 4).ok());
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, z)->location, zm->location);
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, s)->codec, format::Codec::kRaw);
  ExpectDecodes(z, v2);
}

// A base that stays as it is (here: no smaller as a delta of an unrelated
// successor) is copied out of the short-lived segment a save stored it in,
// so that segment can die whole; it still decodes, and nothing else moves.
TEST_F(RebaserTest, ABaseKeptAsItIsLeavesItsShortLivedSegment) {
  // Random bits: no delta of them is smaller.
  auto random_bits = [](uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> v(kFloats);
    for (float& x : v) {
      const uint32_t bits = rng();
      std::memcpy(&x, &bits, 4);
    }
    return v;
  };
  const std::vector<float> v0 = random_bits(21);
  const std::vector<float> v1 = random_bits(22);
  const format::ChunkId b =
      stores_.Put(kRebasedJob, BytesOf(v0), format::Codec::kRaw, {},
                  RecordLifetime::kSaved);
  const format::ChunkId y =
      stores_.Put(kRebasedJob, BytesOf(v1), format::Codec::kRaw, {},
                  RecordLifetime::kSaved);
  auto before = meta_->GetChunk(kRebasedJob, b);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(segments_->ShortLived(kRebasedJob, before->location.segment));
  Rebaser rebaser(segments_, meta_);
  ASSERT_TRUE(rebaser.RebaseWhole(kRebasedJob, y, b, 4).ok());
  auto after = meta_->GetChunk(kRebasedJob, b);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->codec, format::Codec::kRaw);
  EXPECT_FALSE(after->base.has_value());
  EXPECT_NE(after->location.segment, before->location.segment);
  EXPECT_FALSE(segments_->ShortLived(kRebasedJob, after->location.segment));
  EXPECT_EQ(rebaser.Stats().keyframes, 1u);
  EXPECT_EQ(rebaser.Stats().moved, 1u);
  ExpectDecodes(b, v0);
  ExpectDecodes(y, v1);
  // Once moved, it stays: a long-lived record is not copied again.
  ASSERT_TRUE(rebaser.RebaseWhole(kRebasedJob, y, b, 4).ok());
  EXPECT_EQ(meta_->GetChunk(kRebasedJob, b)->location, after->location);
  EXPECT_EQ(rebaser.Stats().moved, 1u);
}

// While the client traffic predicate says a save is being served, a queued
// rebase waits (here without a time bound); once it clears, it runs.
TEST_F(RebaserTest, RebasesWaitWhileClientsAreServed) {
  const std::vector<float> v0 = Weights(11);
  const std::vector<float> v1 = Step(v0, 4);
  Put(v0, format::Codec::kByteGroupZstd);
  const format::ChunkId y = Put(v1, format::Codec::kXorByteGroupZstd, &v0);
  RebaserOptions o;
  o.max_yield = absl::Hours(1);
  std::atomic<bool> serving{true};
  std::atomic<int> asked{0};
  Rebaser rebaser(segments_, meta_, o);
  rebaser.SetClientTraffic([&] {
    ++asked;
    return serving.load();
  });
  rebaser.Enqueue(kRebasedJob, y);
  while (asked.load() < 3) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(rebaser.Stats().rebased, 0u);  // still waiting: asked again
  EXPECT_TRUE(format::IsDelta(meta_->GetChunk(kRebasedJob, y)->codec));
  serving = false;
  rebaser.WaitIdle();
  EXPECT_EQ(rebaser.Stats().rebased, 1u);
  EXPECT_FALSE(format::IsDelta(meta_->GetChunk(kRebasedJob, y)->codec));
}

}  // namespace
}  // namespace stagger::server
