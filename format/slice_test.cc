#include "format/slice.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

namespace stagger::format {
namespace {

// Global row-major index of a box's element at local row-major index `i`.
uint64_t GlobalIndex(const Box& b, const std::vector<int64_t>& global,
                     uint64_t i) {
  uint64_t g = 0, stride = 1;
  for (size_t d = b.shape.size(); d-- > 0;) {
    uint64_t local = i % static_cast<uint64_t>(b.shape[d]);
    i /= static_cast<uint64_t>(b.shape[d]);
    g += (local + static_cast<uint64_t>(b.offset[d])) * stride;
    stride *= static_cast<uint64_t>(global[d]);
  }
  return g;
}

bool Contains(const Box& b, const std::vector<int64_t>& pos) {
  for (size_t d = 0; d < pos.size(); ++d) {
    if (pos[d] < b.offset[d] || pos[d] >= b.offset[d] + b.shape[d]) {
      return false;
    }
  }
  return true;
}

std::vector<int64_t> Position(const std::vector<int64_t>& global, uint64_t g) {
  std::vector<int64_t> pos(global.size());
  for (size_t d = global.size(); d-- > 0;) {
    pos[d] = static_cast<int64_t>(g % static_cast<uint64_t>(global[d]));
    g /= static_cast<uint64_t>(global[d]);
  }
  return pos;
}

// Applies `plan` to the saved slice's bytes (cut into chunk_size chunks)
// and checks the result against an element-by-element copy: every element
// of `wanted` inside `saved` equals its global value, each byte written
// once, nothing else touched.
void CheckPlan(const Box& saved, const Box& wanted,
               const std::vector<int64_t>& global, uint64_t esize,
               uint64_t chunk, const ChunkPlan& plan) {
  const uint64_t saved_n = Elements(saved), wanted_n = Elements(wanted);
  // Element value = its global index, spread over esize bytes.
  std::vector<unsigned char> src(saved_n * esize);
  for (uint64_t i = 0; i < saved_n; ++i) {
    uint64_t g = GlobalIndex(saved, global, i);
    for (uint64_t b = 0; b < esize; ++b) src[i * esize + b] = (g >> (8 * b));
  }
  std::vector<unsigned char> dst(wanted_n * esize, 0xAB);
  std::vector<int> writes(wanted_n * esize, 0);
  const uint64_t chunks = (src.size() + chunk - 1) / chunk;
  for (const auto& [c, runs] : plan) {
    ASSERT_LT(c, chunks);
    const uint64_t len = std::min<uint64_t>(chunk, src.size() - c * chunk);
    ASSERT_FALSE(runs.empty());
    for (const CopyRun& r : runs) {
      ASSERT_GT(r.length, 0u);
      ASSERT_LE(r.src + r.length, len) << "run leaves chunk " << c;
      ASSERT_LE(r.dst + r.length, dst.size());
      std::memcpy(&dst[r.dst], &src[c * chunk + r.src], r.length);
      for (uint64_t k = 0; k < r.length; ++k) ++writes[r.dst + k];
    }
  }
  for (uint64_t i = 0; i < wanted_n; ++i) {
    uint64_t g = GlobalIndex(wanted, global, i);
    bool in = Contains(saved, Position(global, g));
    for (uint64_t b = 0; b < esize; ++b) {
      uint64_t k = i * esize + b;
      if (in) {
        ASSERT_EQ(writes[k], 1) << "element " << i;
        ASSERT_EQ(dst[k], static_cast<unsigned char>(g >> (8 * b)))
            << "element " << i << " byte " << b;
      } else {
        ASSERT_EQ(writes[k], 0) << "element " << i;
        ASSERT_EQ(dst[k], 0xAB);
      }
    }
  }
}

Box RandomBox(std::mt19937& rng, const std::vector<int64_t>& global) {
  Box b;
  for (int64_t g : global) {
    int64_t lo = std::uniform_int_distribution<int64_t>(0, g)(rng);
    int64_t hi = std::uniform_int_distribution<int64_t>(lo, g)(rng);
    // Mostly non-empty: an empty box now and then.
    if (hi == lo && lo < g && rng() % 4 != 0) ++hi;
    b.offset.push_back(lo);
    b.shape.push_back(hi - lo);
  }
  return b;
}

TEST(SliceTest, RowShardIntoColumnShard) {
  // Global [8,16] F32; saved rows 4..8, wanted columns 8..16.
  Box saved{{4, 0}, {4, 16}}, wanted{{0, 8}, {8, 8}};
  auto plan = PlanSliceCopy(saved, wanted, 4, 64);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Rows 4..8 of the saved slice are 64-byte rows: one chunk each, and the
  // right half (bytes 32..64) of each lands in wanted rows 4..8.
  ASSERT_EQ(plan->size(), 4u);
  for (uint64_t c = 0; c < 4; ++c) {
    ASSERT_EQ(plan->at(c).size(), 1u);
    EXPECT_EQ(plan->at(c)[0], (CopyRun{32, (4 + c) * 32, 32}));
  }
  CheckPlan(saved, wanted, {8, 16}, 4, 64, *plan);
}

TEST(SliceTest, SameSliceIsOneRunPerWholeChunk) {
  Box b{{16, 0}, {16, 1024}};
  auto plan = PlanSliceCopy(b, b, 4, 4096);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 16u);
  for (const auto& [c, runs] : *plan) {
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0], (CopyRun{0, c * 4096, 4096}));
  }
}

TEST(SliceTest, DisjointSlicesNeedNothing) {
  auto plan = PlanSliceCopy({{0, 0}, {4, 8}}, {{4, 0}, {4, 8}}, 4, 4096);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->empty());
  // An empty wanted slice inside the saved one needs nothing either.
  plan = PlanSliceCopy({{0, 0}, {4, 8}}, {{2, 0}, {0, 8}}, 4, 4096);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->empty());
}

TEST(SliceTest, ScalarIsOneElement) {
  auto plan = PlanSliceCopy({{}, {}}, {{}, {}}, 8, 4096);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_EQ(plan->at(0), (std::vector<CopyRun>{{0, 0, 8}}));
}

TEST(SliceTest, RunsSplitAtChunkBoundaries) {
  // A 1-D slice whose 40 bytes straddle two 32-byte chunks.
  Box saved{{0}, {16}}, wanted{{5}, {10}};
  auto plan = PlanSliceCopy(saved, wanted, 4, 32);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ(plan->at(0), (std::vector<CopyRun>{{20, 0, 12}}));
  EXPECT_EQ(plan->at(1), (std::vector<CopyRun>{{0, 12, 28}}));
  CheckPlan(saved, wanted, {16}, 4, 32, *plan);
}

TEST(SliceTest, BadInputsAreRejected) {
  EXPECT_EQ(PlanSliceCopy({{0}, {4}}, {{0, 0}, {4, 4}}, 4, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSliceCopy({{0}, {-1}}, {{0}, {4}}, 4, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSliceCopy({{0}, {4}}, {{0}, {4}}, 0, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSliceCopy({{0}, {4}}, {{0}, {4}}, 4, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanSliceCopy({{0, 1}, {4}}, {{0}, {4}}, 4, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SliceTest, BoxString) {
  EXPECT_EQ(BoxString({{2, 0}, {3, 8}}), "[2:5,0:8]");
  EXPECT_EQ(BoxString({{}, {}}), "[]");
}

TEST(SliceTest, RandomSlicesMatchElementByElementCopy) {
  std::mt19937 rng(20240611);
  for (int iter = 0; iter < 3000; ++iter) {
    const size_t rank = rng() % 5;  // scalars up to 4-D
    std::vector<int64_t> global;
    for (size_t d = 0; d < rank; ++d) {
      // 1-element dimensions often.
      global.push_back(rng() % 3 == 0 ? 1 : 1 + rng() % 7);
    }
    Box saved = RandomBox(rng, global), wanted = RandomBox(rng, global);
    if (rng() % 5 == 0) wanted = saved;
    const uint64_t esize = uint64_t{1} << (rng() % 4);
    const uint64_t chunk = 1 + rng() % 40;
    auto plan = PlanSliceCopy(saved, wanted, esize, chunk);
    ASSERT_TRUE(plan.ok()) << plan.status();
    SCOPED_TRACE(testing::Message()
                 << "iter " << iter << " saved " << BoxString(saved)
                 << " wanted " << BoxString(wanted) << " esize " << esize
                 << " chunk " << chunk);
    CheckPlan(saved, wanted, global, esize, chunk, *plan);
    if (HasFatalFailure()) return;
  }
}

TEST(SliceTest, RandomSubtractionsPartitionTheDifference) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    const size_t rank = 1 + rng() % 4;
    std::vector<int64_t> global;
    uint64_t total = 1;
    for (size_t d = 0; d < rank; ++d) {
      global.push_back(1 + rng() % 6);
      total *= global.back();
    }
    Box a = RandomBox(rng, global), b = RandomBox(rng, global);
    std::vector<Box> parts = Subtract(a, b);
    ASSERT_LE(parts.size(), 2 * rank);
    SCOPED_TRACE(testing::Message()
                 << "a " << BoxString(a) << " b " << BoxString(b));
    for (uint64_t g = 0; g < total; ++g) {
      std::vector<int64_t> pos = Position(global, g);
      int in_parts = 0;
      for (const Box& p : parts) {
        ASSERT_GT(Elements(p), 0u);
        in_parts += Contains(p, pos);
      }
      const bool want = Contains(a, pos) && !Contains(b, pos);
      ASSERT_EQ(in_parts, want ? 1 : 0) << "element " << g;
    }
    std::optional<Box> common = Intersect(a, b);
    uint64_t covered = common ? Elements(*common) : 0;
    for (const Box& p : parts) covered += Elements(p);
    ASSERT_EQ(covered, Elements(a));
  }
}

}  // namespace
}  // namespace stagger::format
