// SliceIndex: which shards of a step hold part of a region, and that a
// step is read once and kept.
#include "server/slice_index.h"

#include <gtest/gtest.h>

namespace stagger::server {
namespace {

// Rank r of 4 holds rows [25r, 25r + 25) of a [100, 8] tensor "w", a
// per-rank tensor "rng", and rank 0 the replicated "norm" [8].
pb::ShardManifest Shard(uint32_t r) {
  pb::ShardManifest m;
  m.set_rank(r);
  auto* w = m.add_tensors();
  w->set_name("w");
  w->add_shape(25);
  w->add_shape(8);
  w->add_global_shape(100);
  w->add_global_shape(8);
  w->add_global_offset(25 * r);
  w->add_global_offset(0);
  m.add_tensors()->set_name("rng");
  m.mutable_tensors(1)->add_shape(4);
  if (r == 0) {
    auto* n = m.add_tensors();
    n->set_name("norm");
    n->add_shape(8);
    n->add_global_shape(8);
  }
  return m;
}

pb::TensorRegion Region(const std::string& name, std::vector<int64_t> off,
                        std::vector<int64_t> shape) {
  pb::TensorRegion r;
  r.set_name(name);
  for (int64_t o : off) r.add_offset(o);
  for (int64_t s : shape) r.add_shape(s);
  return r;
}

class SliceIndexTest : public ::testing::Test {
 protected:
  SliceIndexTest() {
    info_.set_step(1);
    info_.set_world_size(4);
    info_.set_complete(true);
    for (uint32_t r = 0; r < 4; ++r) info_.add_committed_ranks(r);
  }
  std::map<uint32_t, std::set<std::string>> Find(
      const std::vector<pb::TensorRegion>& regions, uint32_t prefer) {
    google::protobuf::RepeatedPtrField<pb::TensorRegion> field;
    for (const auto& r : regions) *field.Add() = r;
    auto found =
        index_.Find("job", info_, field, prefer, [this](uint32_t rank) {
          ++reads_;
          return Result<pb::ShardManifest>(Shard(rank));
        });
    EXPECT_TRUE(found.ok()) << found.status();
    return found.ok() ? *found : std::map<uint32_t, std::set<std::string>>{};
  }

  SliceIndex index_;
  pb::StepInfo info_;
  int reads_ = 0;
};

TEST_F(SliceIndexTest, OnlyTheShardsHoldingTheRegion) {
  // Rows [40, 60): ranks 1 and 2; rows [50, 75): rank 2 alone.
  auto found = Find({Region("w", {40, 0}, {20, 8})}, 7);
  EXPECT_EQ(found, (std::map<uint32_t, std::set<std::string>>{{1, {"w"}},
                                                              {2, {"w"}}}));
  found = Find({Region("w", {50, 0}, {25, 8})}, 7);
  EXPECT_EQ(found.size(), 1u);
  EXPECT_EQ(found.count(2), 1u);
  // Each shard was read once, for the first question only.
  EXPECT_EQ(reads_, 4);
}

TEST_F(SliceIndexTest, ReplicatedFromRankZeroPerRankFromThePreferredAndZero) {
  auto found = Find({Region("norm", {0}, {8}), Region("rng", {0}, {4})}, 3);
  EXPECT_EQ(found, (std::map<uint32_t, std::set<std::string>>{
                       {0, {"norm", "rng"}}, {3, {"rng"}}}));
  // A name no shard has, and an empty region: nothing.
  EXPECT_TRUE(Find({Region("nope", {0}, {1})}, 0).empty());
  EXPECT_TRUE(Find({Region("w", {10, 0}, {0, 8})}, 9).empty());
}

TEST_F(SliceIndexTest, AnIncompleteStepIsRefused) {
  info_.set_complete(false);
  google::protobuf::RepeatedPtrField<pb::TensorRegion> field;
  auto found = index_.Find("job", info_, field, 0, [](uint32_t rank) {
    return Result<pb::ShardManifest>(Shard(rank));
  });
  EXPECT_EQ(found.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SliceOverlapTest, Boxes) {
  auto f = [](std::vector<int64_t> v) {
    google::protobuf::RepeatedField<int64_t> r;
    for (int64_t x : v) r.Add(x);
    return r;
  };
  EXPECT_TRUE(SliceIndex::Overlap(f({0, 0}), f({2, 2}), f({1, 1}), f({2, 2})));
  EXPECT_FALSE(SliceIndex::Overlap(f({0, 0}), f({2, 2}), f({2, 0}), f({2, 2})));
  EXPECT_FALSE(SliceIndex::Overlap(f({0}), f({0}), f({0}), f({4})));
  EXPECT_TRUE(SliceIndex::Overlap(f({}), f({}), f({}), f({})));  // scalars
  EXPECT_TRUE(SliceIndex::Overlap(f({0}), f({2}), f({0, 0}), f({2, 2})));
}

}  // namespace
}  // namespace stagger::server
