#include "client/save_plan.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace stagger::client {
namespace {

constexpr uint64_t kPlanChunk = 1024;

format::ChunkId Id(uint8_t n) {
  std::string bytes(16, static_cast<char>(n));
  return *format::ChunkId::FromBytes(bytes);
}

class SavePlanTest : public ::testing::Test {
 protected:
  SavePlanOptions Options() {
    SavePlanOptions o;
    o.job = "j";
    o.step = 7;
    o.rank = 1;
    o.world_size = 2;
    o.replicas = 1;
    o.chunk_size = kPlanChunk;
    o.created_unix_ms = 1234;
    o.deltas_on = true;
    o.delta_chain_max = 2;
    o.keep_budget = 1 << 20;
    o.slot_servers = [this](const std::string& name, uint64_t index) {
      asked_.push_back(name + "/" + std::to_string(index));
      return std::vector<ServerConn*>{&server_};
    };
    return o;
  }
  // A previous save of `n` chunks of a tensor of `bytes`: ids 1.., each
  // version held and `depth` deltas deep.
  static PreviousChunks Previous(uint64_t bytes, size_t n, int depth) {
    PreviousChunks p;
    p.bytes = bytes;
    p.chunk_size = kPlanChunk;
    for (size_t i = 0; i < n; ++i) {
      p.ids.push_back(Id(static_cast<uint8_t>(i + 1)));
      p.versions.push_back(
          std::make_shared<const std::string>(kPlanChunk, 'v'));
      p.depth.push_back(depth);
      p.fingerprints.emplace_back();
      p.at_home.push_back(true);
    }
    return p;
  }

  ServerConn server_;
  std::vector<std::string> asked_;
  std::vector<char> a_ = std::vector<char>(2 * kPlanChunk + 100);
  std::vector<char> b_ = std::vector<char>(kPlanChunk);
  TensorSpec sa_{"a", "F32", {int64_t(a_.size() / 4)}, a_.data()};
  TensorSpec sb_{"b", "U8", {int64_t(b_.size())}, b_.data()};
};

TEST_F(SavePlanTest, TheManifestAndItsChunksFollowTheTensors) {
  SavePlan plan = PlanSave(Options(), {{&sa_, a_.size(), nullptr, {}},
                                       {&sb_, b_.size(), nullptr, {}}});
  const pb::ShardManifest& m = *plan.manifest;
  EXPECT_EQ(m.job(), "j");
  EXPECT_EQ(m.step(), 7);
  EXPECT_EQ(m.rank(), 1u);
  EXPECT_EQ(m.world_size(), 2u);
  EXPECT_EQ(m.chunk_size(), kPlanChunk);
  EXPECT_EQ(m.created_unix_ms(), 1234);
  ASSERT_EQ(m.tensors_size(), 2);
  EXPECT_EQ(m.tensors(0).name(), "a");
  EXPECT_EQ(m.tensors(0).chunks_size(), 3);  // two whole, one tail
  EXPECT_EQ(m.tensors(1).chunks_size(), 1);
  EXPECT_EQ(plan.state_bytes, a_.size() + b_.size());
  EXPECT_EQ(plan.tensor_bytes, (std::vector<uint64_t>{a_.size(), b_.size()}));
  ASSERT_EQ(plan.chunks.size(), 4u);
  EXPECT_EQ(plan.chunks[0].src, a_.data());
  EXPECT_EQ(plan.chunks[2].src, a_.data() + 2 * kPlanChunk);
  EXPECT_EQ(plan.chunks[2].len, 100u);
  EXPECT_EQ(plan.chunks[2].ref, &m.tensors(0).chunks(2));
  EXPECT_EQ(plan.chunks[3].ref, &m.tensors(1).chunks(0));
  EXPECT_EQ(plan.chunks[0].element_size, 4);  // floats are byte-grouped
  EXPECT_EQ(plan.chunks[3].element_size, 0);
  EXPECT_EQ(asked_, (std::vector<std::string>{"a/0", "a/1", "a/2", "b/0"}));
  // Nothing before: no previous versions, nothing to delta against.
  for (const SaveChunk& c : plan.chunks) {
    EXPECT_FALSE(c.previous.has_value());
    EXPECT_EQ(c.previous_bytes, nullptr);
    EXPECT_FALSE(c.base_not_held);
  }
  // The refs stay valid when the manifest is moved (into the save job).
  pb::ShardManifest moved = std::move(*plan.manifest);
  EXPECT_EQ(plan.chunks[3].ref, &moved.tensors(1).chunks(0));
}

TEST_F(SavePlanTest, DeltaBasesFollowTheHistoryTheChainAndTheBudget) {
  SavePlanOptions o = Options();
  o.keep_budget = 2 * kPlanChunk;  // the first two chunks keep their bytes
  PreviousChunks pa = Previous(a_.size(), 3, /*depth=*/1);
  pa.versions[1] = nullptr;  // not held: did not fit last time
  PreviousChunks pb = Previous(b_.size(), 1, /*depth=*/2);  // at the cut
  SavePlan plan = PlanSave(
      o, {{&sa_, a_.size(), nullptr, pa}, {&sb_, b_.size(), nullptr, pb}});
  ASSERT_EQ(plan.chunks.size(), 4u);
  EXPECT_EQ(plan.chunks[0].previous, Id(1));
  EXPECT_EQ(plan.chunks[0].previous_bytes, pa.versions[0]);
  EXPECT_TRUE(plan.chunks[0].previous_at_home);
  EXPECT_EQ(plan.chunks[1].previous_bytes, nullptr);
  EXPECT_TRUE(plan.chunks[1].base_not_held);
  EXPECT_EQ(plan.chunks[2].previous_bytes, pa.versions[2]);
  // A chain at delta_chain_max is cut (a whole chunk goes) unless every
  // server of the slot rebases deltas.
  EXPECT_EQ(plan.chunks[3].previous, Id(1));
  EXPECT_EQ(plan.chunks[3].previous_bytes, nullptr);
  EXPECT_FALSE(plan.chunks[3].base_not_held);
  EXPECT_TRUE(plan.chunks[0].keep_bytes);
  EXPECT_TRUE(plan.chunks[1].keep_bytes);
  EXPECT_FALSE(plan.chunks[2].keep_bytes);  // 100 bytes, budget spent
  EXPECT_FALSE(plan.chunks[3].keep_bytes);

  server_.rebases_deltas = true;
  SavePlan rebased = PlanSave(o, {{&sb_, b_.size(), nullptr, pb}});
  EXPECT_EQ(rebased.chunks[0].previous_bytes, pb.versions[0]);

  // Deltas off: ids still link unchanged chunks, no bytes are kept.
  o.deltas_on = false;
  SavePlan off = PlanSave(o, {{&sa_, a_.size(), nullptr, pa}});
  for (const SaveChunk& c : off.chunks) {
    EXPECT_TRUE(c.previous.has_value());
    EXPECT_EQ(c.previous_bytes, nullptr);
    EXPECT_FALSE(c.base_not_held);
    EXPECT_FALSE(c.keep_bytes);
  }
}

TEST_F(SavePlanTest, OutcomesBecomeTheNextPlansHistory) {
  SavePlan plan = PlanSave(Options(), {{&sb_, b_.size(), nullptr, {}}});
  plan.manifest->mutable_tensors(0)->mutable_chunks(0)->set_id(Id(9).ToBytes());
  auto bytes = std::make_shared<const std::string>(kPlanChunk, 'x');
  std::map<std::string, PreviousChunks> history;
  ChunkOutcome whole;
  whole.bytes = bytes;
  whole.at_home = true;
  RememberOutcomes(*plan.manifest, {whole}, &history);
  ASSERT_EQ(history.count("b"), 1u);
  EXPECT_EQ(history["b"].ids, std::vector<format::ChunkId>{Id(9)});
  EXPECT_EQ(history["b"].versions[0], bytes);
  EXPECT_EQ(history["b"].depth[0], 0);
  // A delta on the same layout is one deeper; an unchanged chunk keeps
  // its version and depth.
  ChunkOutcome delta = whole;
  delta.delta = true;
  RememberOutcomes(*plan.manifest, {delta}, &history);
  EXPECT_EQ(history["b"].depth[0], 1);
  ChunkOutcome same;
  same.unchanged = true;
  RememberOutcomes(*plan.manifest, {same}, &history);
  EXPECT_EQ(history["b"].depth[0], 1);
  EXPECT_EQ(history["b"].versions[0], bytes);
  EXPECT_FALSE(history["b"].at_home[0]);
  // A malformed id (not the 16 bytes of one) forgets the tensor's history
  // instead of trusting it.
  pb::ShardManifest bad = *plan.manifest;
  bad.mutable_tensors(0)->mutable_chunks(0)->set_id("short");
  RememberOutcomes(bad, {whole}, &history);
  EXPECT_EQ(history.count("b"), 0u);
}

}  // namespace
}  // namespace stagger::client
