#include "server/meta_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

namespace stagger::server {
namespace {

class MetaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("stagger-meta-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    auto m = MetaStore::Open(dir_.string());
    ASSERT_TRUE(m.ok()) << m.status();
    meta_ = std::move(*m);
  }
  void TearDown() override {
    meta_.reset();
    std::filesystem::remove_all(dir_);
  }

  format::ChunkId StoreChunk(uint64_t n, uint64_t raw = 4096) {
    format::ChunkId id{n, n * 31 + 7};
    ChunkMeta cm;
    cm.location = {1, n * 4096, 8192};
    cm.raw_length = raw;
    cm.stored_length = raw / 2;
    cm.codec = format::Codec::kZstd;
    EXPECT_TRUE(meta_->PutChunk("job", id, cm).ok());
    return id;
  }

  pb::ShardManifest Shard(int64_t step, uint32_t rank, uint32_t world,
                          format::ChunkId id) {
    pb::ShardManifest m;
    m.set_job("job");
    m.set_step(step);
    m.set_rank(rank);
    m.set_world_size(world);
    m.set_chunk_size(4096);
    auto* t = m.add_tensors();
    t->set_name("w" + std::to_string(rank));
    t->set_dtype("U8");
    t->add_shape(4096);
    t->set_byte_size(4096);
    auto* c = t->add_chunks();
    c->set_id(id.ToBytes());
    c->set_raw_length(4096);
    return m;
  }

  std::filesystem::path dir_;
  std::unique_ptr<MetaStore> meta_;
};

TEST_F(MetaStoreTest, StepCompletesOnlyWhenAllRanksCommit) {
  auto id = StoreChunk(1);
  auto s1 = meta_->CommitShard(Shard(5, 0, 2, id));
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_FALSE(s1->complete());
  EXPECT_EQ(meta_->LatestComplete("job").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(meta_->ListSteps("job", false)->empty());
  ASSERT_EQ(meta_->ListSteps("job", true)->size(), 1u);

  auto s2 = meta_->CommitShard(Shard(5, 1, 2, id));
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_TRUE(s2->complete());
  EXPECT_EQ(s2->raw_bytes(), 8192u);
  EXPECT_EQ(s2->stored_bytes(), 4096u);  // 2 refs x 2048 stored bytes
  EXPECT_EQ(meta_->LatestComplete("job")->step(), 5);
  auto shard = meta_->GetShard("job", 5, 1);
  ASSERT_TRUE(shard.ok());
  // The server fills codec and stored length from its own index.
  EXPECT_EQ(shard->tensors(0).chunks(0).codec(), 1u);
  EXPECT_EQ(shard->tensors(0).chunks(0).stored_length(), 2048u);
}

TEST_F(MetaStoreTest, LatestIgnoresNewerPartialSteps) {
  auto id = StoreChunk(1);
  ASSERT_TRUE(meta_->CommitShard(Shard(3, 0, 1, id)).ok());
  ASSERT_TRUE(meta_->CommitShard(Shard(10, 0, 2, id)).ok());
  EXPECT_EQ(meta_->LatestComplete("job")->step(), 3);
  ASSERT_TRUE(meta_->CommitShard(Shard(7, 0, 1, id)).ok());
  EXPECT_EQ(meta_->LatestComplete("job")->step(), 7);
}

TEST_F(MetaStoreTest, UnknownChunkIsRefused) {
  Status s = meta_->CommitShard(Shard(1, 0, 1, format::ChunkId{9, 9})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not stored"), std::string::npos);
  EXPECT_EQ(meta_->GetStep("job", 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(MetaStoreTest, RetryIsIdempotentConflictIsAborted) {
  auto a = StoreChunk(1), b = StoreChunk(2);
  ASSERT_TRUE(meta_->CommitShard(Shard(1, 0, 2, a)).ok());
  auto again = meta_->CommitShard(Shard(1, 0, 2, a));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->committed_ranks_size(), 1);
  EXPECT_EQ(meta_->CommitShard(Shard(1, 0, 2, b)).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(meta_->CommitShard(Shard(1, 1, 3, a)).status().code(),
            absl::StatusCode::kAborted);
}

TEST_F(MetaStoreTest, InvalidManifestIsRejected) {
  auto id = StoreChunk(1);
  auto m = Shard(1, 2, 2, id);  // rank >= world size
  EXPECT_EQ(meta_->CommitShard(m).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(MetaStoreTest, SurvivesReopen) {
  auto id = StoreChunk(1);
  ASSERT_TRUE(meta_->CommitShard(Shard(4, 0, 1, id)).ok());
  meta_.reset();
  auto m = MetaStore::Open(dir_.string());
  ASSERT_TRUE(m.ok());
  meta_ = std::move(*m);
  EXPECT_EQ(meta_->LatestComplete("job")->step(), 4);
  EXPECT_TRUE(meta_->GetChunk("job", id).ok());
}

TEST_F(MetaStoreTest, GcKeepsNewestStepsAndWhatTheyNeed) {
  // Chunk 1 is a full chunk, chunk 2 a delta on it, chunk 3 unrelated.
  auto c1 = StoreChunk(1);
  ChunkMeta d;
  d.location = {1, 8192, 4096};
  d.raw_length = 4096;
  d.stored_length = 100;
  d.codec = format::Codec::kXorByteGroupZstd;
  d.base = c1;
  format::ChunkId c2{2, 2};
  ASSERT_TRUE(meta_->PutChunk("job", c2, d).ok());
  auto c3 = StoreChunk(3);
  ASSERT_TRUE(meta_->CommitShard(Shard(1, 0, 1, c1)).ok());
  ASSERT_TRUE(meta_->CommitShard(Shard(2, 0, 1, c3)).ok());
  ASSERT_TRUE(meta_->CommitShard(Shard(3, 0, 1, c2)).ok());
  ASSERT_TRUE(meta_->CommitShard(Shard(4, 0, 2, c2)).ok());  // partial

  EXPECT_EQ(meta_->Gc("job", 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A grace covering everything frees steps but no chunks.
  auto g0 = meta_->Gc("job", 2, 3600 * 1000);
  ASSERT_TRUE(g0.ok()) << g0.status();
  EXPECT_EQ(g0->steps_deleted, std::vector<int64_t>{1});
  EXPECT_EQ(g0->chunks_deleted, 0u);

  auto g = meta_->Gc("job", 1, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->steps_deleted, std::vector<int64_t>{2});
  EXPECT_EQ(g->steps_kept, 2u);      // step 3 and the partial step 4
  EXPECT_EQ(g->chunks_deleted, 1u);  // only chunk 3
  EXPECT_EQ(meta_->GetStep("job", 2).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(meta_->GetShard("job", 2, 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(meta_->GetChunk("job", c2).ok());
  EXPECT_TRUE(meta_->GetChunk("job", c1).ok());  // base of a live delta
  EXPECT_EQ(meta_->GetChunk("job", c3).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(meta_->LatestComplete("job")->step(), 3);
  // Nothing more to do.
  auto again = meta_->Gc("job", 1, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->steps_deleted.empty());
  EXPECT_EQ(again->chunks_deleted, 0u);
}

}  // namespace
}  // namespace stagger::server
