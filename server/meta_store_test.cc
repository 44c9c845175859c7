#include "server/meta_store.h"

#include <gtest/gtest.h>
#include <rocksdb/env.h>

#include <filesystem>
#include <random>
#include <set>

#include "server/testing/fault_injection_rocks_fs.h"

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

  // Chunk {2, 2}: a 100-byte XOR delta of `base`.
  format::ChunkId StoreDeltaOn(const format::ChunkId& base) {
    ChunkMeta d;
    d.location = {1, 8192, 4096};
    d.raw_length = 4096;
    d.stored_length = 100;
    d.codec = format::Codec::kXorByteGroupZstd;
    d.base = base;
    format::ChunkId id{2, 2};
    EXPECT_TRUE(meta_->PutChunk("job", id, d).ok());
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

// A memory-level shard with a plan gets a record; at start it is set aside
// (the step no longer complete, its chunks still live for gc), committed
// again disk-level it is back and the record gone; a set-aside shard
// forgotten takes a step with no other rank with it.
TEST_F(MetaStoreTest, MemoryLevelShardsAreSetAsideAtStartNotDropped) {
  auto c1 = StoreChunk(1);
  auto c3 = StoreChunk(3);
  ASSERT_TRUE(meta_->CommitShard(Shard(1, 0, 1, c1)).ok());
  pb::MemoryShard plan;
  plan.add_servers("10.0.0.1:7700");
  plan.add_servers("10.0.0.2:7700");
  plan.set_replicas(2);
  pb::ShardManifest two = Shard(2, 0, 1, c3);
  two.set_in_memory(true);
  ASSERT_TRUE(meta_->CommitShard(two, false, nullptr, &plan).ok());
  pb::ShardManifest three = Shard(3, 0, 1, c1);
  three.set_in_memory(true);
  ASSERT_TRUE(meta_->CommitShard(three, false, nullptr, &plan).ok());
  auto records = meta_->MemoryShards();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].step, 2);
  EXPECT_EQ((*records)[0].shard.replicas(), 2u);
  EXPECT_FALSE((*records)[0].shard.has_set_aside());
  EXPECT_EQ(meta_->LatestComplete("job")->step(), 3);

  auto aside = meta_->SetAsideMemoryShards();
  ASSERT_TRUE(aside.ok()) << aside.status();
  EXPECT_EQ((*aside)["job"], (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(meta_->LatestComplete("job")->step(), 1);
  auto step2 = meta_->GetStep("job", 2);
  ASSERT_TRUE(step2.ok());
  EXPECT_FALSE(step2->complete());
  EXPECT_TRUE(step2->committed_ranks().empty());
  EXPECT_TRUE(step2->memory_ranks().empty());
  EXPECT_EQ(step2->raw_bytes(), 0u);
  records = meta_->MemoryShards();
  ASSERT_EQ(records->size(), 2u);
  ASSERT_TRUE((*records)[0].shard.has_set_aside());
  EXPECT_EQ((*records)[0].shard.set_aside().step(), 2);
  EXPECT_EQ((*records)[0].shard.servers_size(), 2);
  // Gc keeps the set-aside shard's chunk (step 2 is the only one using c3).
  auto g = meta_->Gc("job", 1, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(meta_->GetChunk("job", c3).ok());

  // Confirmed on disk: committed again, disk-level.
  pb::ShardManifest back = (*records)[0].shard.set_aside();
  back.set_in_memory(false);
  auto info = meta_->CommitShard(back, true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->complete());
  EXPECT_TRUE(info->memory_ranks().empty());
  EXPECT_EQ(info->raw_bytes(), 4096u);
  EXPECT_EQ(meta_->LatestComplete("job")->step(), 2);
  // Lost: forgotten, and step 3 (no rank left) with it.
  ASSERT_TRUE(meta_->ForgetMemoryShard("job", 3, 0).ok());
  EXPECT_TRUE(meta_->MemoryShards()->empty());
  EXPECT_EQ(meta_->GetStep("job", 3).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(meta_->ListSteps("job", true)->size(), 2u);
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

// A group of commits in one write: each gets the outcome it would get
// alone, in order (a step completing within the group, a retry and a
// conflict of a rank committed earlier in the same group, another world
// size, an unknown chunk), and what it wrote survives a reopen.
TEST_F(MetaStoreTest, AGroupCommitsEachAsAloneInOneWrite) {
  auto a = StoreChunk(1), b = StoreChunk(2);
  std::vector<MetaStore::CommitArgs> group(7);
  group[0].manifest = Shard(1, 0, 3, a);
  group[1].manifest = Shard(1, 1, 3, a);
  group[2].manifest = Shard(1, 1, 3, a);  // the same shard again: a retry
  group[3].manifest = Shard(1, 1, 3, b);  // another shard of rank 1
  group[4].manifest = Shard(1, 2, 4, a);  // another world size
  group[5].manifest = Shard(1, 2, 3, format::ChunkId{9, 9});  // not stored
  group[6].manifest = Shard(1, 2, 3, a);
  std::vector<Result<pb::StepInfo>> out = meta_->CommitShards(group);
  ASSERT_EQ(out.size(), 7u);
  ASSERT_TRUE(out[0].ok()) << out[0].status();
  EXPECT_EQ(out[0]->committed_ranks_size(), 1);
  ASSERT_TRUE(out[1].ok()) << out[1].status();
  EXPECT_EQ(out[1]->committed_ranks_size(), 2);
  ASSERT_TRUE(out[2].ok()) << out[2].status();
  EXPECT_EQ(out[2]->committed_ranks_size(), 2);
  EXPECT_EQ(out[3].status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(out[4].status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(out[5].status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(out[6].ok()) << out[6].status();
  EXPECT_TRUE(out[6]->complete());
  EXPECT_FALSE(out[1]->complete());
  meta_.reset();
  auto m = MetaStore::Open(dir_.string());
  ASSERT_TRUE(m.ok());
  meta_ = std::move(*m);
  auto info = meta_->GetStep("job", 1);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->complete());
  EXPECT_EQ(info->committed_ranks_size(), 3);
  EXPECT_EQ(info->raw_bytes(), 3u * 4096);
  EXPECT_TRUE(meta_->GetShard("job", 1, 2).ok());
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
  format::ChunkId c2 = StoreDeltaOn(c1);
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

TEST_F(MetaStoreTest, DeleteStepsKeepsWhatTheOthersNeedAndNamesWhatIsMissing) {
  // Step 1 holds chunk 1, whole; step 2 a delta on it; step 3 chunk 3.
  auto c1 = StoreChunk(1);
  format::ChunkId c2 = StoreDeltaOn(c1);
  auto c3 = StoreChunk(3);
  ASSERT_TRUE(meta_->CommitShard(Shard(1, 0, 1, c1)).ok());
  ASSERT_TRUE(meta_->CommitShard(Shard(2, 0, 1, c2)).ok());
  ASSERT_TRUE(meta_->CommitShard(Shard(3, 0, 1, c3)).ok());

  for (auto bad : {meta_->DeleteSteps("job", {}, false, 0),
                   meta_->DeleteSteps("job", {1}, true, 0),
                   meta_->DeleteSteps("job", {-1}, false, 0),
                   meta_->DeleteSteps("job", {1}, false, -5),
                   meta_->DeleteSteps("bad job", {1}, false, 0)}) {
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument)
        << bad.status();
  }
  auto missing = meta_->DeleteSteps("job", {1, 7, 9}, false, 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(
                "has no step 7, 9 on this server (steps: 1, 2, 3); nothing"),
            std::string::npos)
      << missing.status();
  EXPECT_TRUE(meta_->GetStep("job", 1).ok());  // nothing was deleted

  // Step 1 goes; its chunk is the base of step 2's delta and stays.
  auto r = meta_->DeleteSteps("job", {1}, false, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps_deleted, std::vector<int64_t>{1});
  EXPECT_EQ(r->steps_kept, 2u);
  EXPECT_EQ(r->chunks_deleted, 0u);
  EXPECT_TRUE(meta_->GetChunk("job", c1).ok());
  // All of it: every chunk goes, and the job is gone from the listing.
  auto all = meta_->DeleteSteps("job", {}, true, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->steps_deleted, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(all->chunks_deleted, 3u);
  EXPECT_EQ(meta_->ListJobs().value(), std::vector<std::string>{});
  // A job with no steps here: refused, nothing to decide from.
  EXPECT_EQ(meta_->DeleteSteps("job", {}, true, 0).status().code(),
            absl::StatusCode::kNotFound);
}

// The rebaser makes an older version a delta of a newer one (Restore). If
// that lands while a deletion decides what is live, the older chunk (kept)
// could come to depend on the newer one (found dead and deleted): a kept
// step that no longer loads. Seen as rm_cli_test failing in one of five
// runs of the suite at ctest -j4; here the rebase is put exactly in that
// window.
TEST_F(MetaStoreTest, ARebaseDuringACollectionIsRefusedAndKeepsTheKeptStep) {
  auto c1 = StoreChunk(1);  // step 1, whole
  auto c3 = StoreChunk(3);  // step 3, whole: the newer version
  ASSERT_TRUE(meta_->CommitShard(Shard(1, 0, 1, c1)).ok());
  ASSERT_TRUE(meta_->CommitShard(Shard(3, 0, 1, c3)).ok());
  const ChunkMeta before = meta_->GetChunk("job", c1).value();
  // Chunk 1 anew as a delta of chunk 3, as the rebaser would write it.
  ChunkMeta as_delta = before;
  as_delta.location = {2, 0, 4096};
  as_delta.codec = format::Codec::kXorByteGroupZstd;
  as_delta.stored_length = 100;
  as_delta.base = c3;
  Status during = absl::UnknownError("the hook did not run");
  meta_->SetCollectHookForTesting([&](const std::string& job) {
    during = meta_->Restore(job, {{c1, before.location, as_delta}});
  });
  auto r = meta_->DeleteSteps("job", {3}, false, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(during.code(), absl::StatusCode::kAborted) << during;
  EXPECT_NE(during.message().find("job 'job' is being collected"),
            std::string::npos)
      << during;
  EXPECT_EQ(r->chunks_deleted, 1u);  // chunk 3, unreferenced
  // Step 1's chunk is as it was: whole, at its place, loadable.
  const ChunkMeta after = meta_->GetChunk("job", c1).value();
  EXPECT_FALSE(after.base.has_value());
  EXPECT_EQ(after.location, before.location);
  // Outside a collection the same rebase stands, and a later deletion
  // keeps its base.
  meta_->SetCollectHookForTesting(nullptr);
  auto c5 = StoreChunk(5);
  ASSERT_TRUE(meta_->CommitShard(Shard(5, 0, 1, c5)).ok());
  as_delta.base = c5;
  ASSERT_TRUE(meta_->Restore("job", {{c1, before.location, as_delta}}).ok());
  auto r5 = meta_->DeleteSteps("job", {5}, false, 0);
  ASSERT_TRUE(r5.ok()) << r5.status();
  EXPECT_EQ(r5->chunks_deleted, 0u);
  EXPECT_TRUE(meta_->GetChunk("job", c5).ok());
}

TEST_F(MetaStoreTest, ListJobsNamesJobsWithStepsOrChunks) {
  EXPECT_EQ(meta_->ListJobs().value(), std::vector<std::string>{});
  auto c1 = StoreChunk(1);  // job "job": a chunk, then a step
  ChunkMeta cm;
  cm.location = {1, 0, 4096};
  cm.raw_length = 4096;
  cm.stored_length = 4096;
  ASSERT_TRUE(meta_->PutChunk("a.b-c", format::ChunkId{5, 5}, cm).ok());
  ASSERT_TRUE(meta_->PutChunk("job2", format::ChunkId{6, 6}, cm).ok());
  ASSERT_TRUE(meta_->CommitShard(Shard(1, 0, 1, c1)).ok());
  EXPECT_EQ(meta_->ListJobs().value(),
            (std::vector<std::string>{"a.b-c", "job", "job2"}));
}

TEST_F(MetaStoreTest, RelocateMovesOnlyEntriesStillAtTheOldPlace) {
  auto a = StoreChunk(1);  // at {1, 4096, 8192}
  auto b = StoreChunk(2);  // at {1, 8192, 8192}
  format::ChunkId gone{77, 77};
  const ChunkLocation to{5, 0, 8192};
  auto moved = meta_->RelocateChunks(
      "job", {
                 {a, {1, 4096, 8192}, to},
                 // b moved elsewhere meanwhile: left where it is.
                 {b, {1, 0, 8192}, {5, 8192, 8192}},
                 // Collected meanwhile: not brought back.
                 {gone, {1, 0, 8192}, {5, 16384, 8192}},
             });
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 1u);
  auto am = meta_->GetChunk("job", a);
  ASSERT_TRUE(am.ok());
  EXPECT_TRUE(am->location == to);
  EXPECT_EQ(am->stored_length, 2048u);  // the rest of the entry is kept
  EXPECT_EQ(am->codec, format::Codec::kZstd);
  EXPECT_EQ(meta_->GetChunk("job", b)->location.offset, 8192u);
  EXPECT_EQ(meta_->GetChunk("job", gone).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(MetaStoreTest, CommitWithChunksElsewhereTakesTheManifestsWord) {
  format::ChunkId remote{9, 9};
  auto m = Shard(1, 0, 1, remote);
  auto* c = m.mutable_tensors(0)->mutable_chunks(0);
  c->set_codec(static_cast<uint32_t>(format::Codec::kZstd));
  c->set_stored_length(1000);
  EXPECT_EQ(meta_->CommitShard(m).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto info = meta_->CommitShard(m, /*chunks_elsewhere=*/true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->complete());
  EXPECT_EQ(info->stored_bytes(), 1000u);
  EXPECT_EQ(meta_->GetShard("job", 1, 0)->tensors(0).chunks(0).codec(), 1u);

  auto delta = Shard(2, 0, 1, remote);  // delta without a base
  delta.mutable_tensors(0)->mutable_chunks(0)->set_codec(
      static_cast<uint32_t>(format::Codec::kXorByteGroupZstd));
  EXPECT_EQ(meta_->CommitShard(delta, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto based = Shard(3, 0, 1, remote);  // a base on a non-delta
  based.mutable_tensors(0)->mutable_chunks(0)->set_base_id(
      format::ChunkId{1, 1}.ToBytes());
  Status s = meta_->CommitShard(based, true).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("base id"), std::string::npos) << s;
}

TEST_F(MetaStoreTest, LiveChunksAreManifestsAndTheirBases) {
  EXPECT_EQ(meta_->LiveChunks("job").status().code(),
            absl::StatusCode::kNotFound);
  auto c1 = StoreChunk(1);
  format::ChunkId c2 = StoreDeltaOn(c1);
  StoreChunk(3);  // referenced by nothing
  ASSERT_TRUE(meta_->CommitShard(Shard(1, 0, 2, c2)).ok());  // partial
  // A chunk on another server, a delta whose base is there too.
  format::ChunkId remote{9, 9}, remote_base{8, 8};
  auto m = Shard(1, 1, 2, remote);
  auto* c = m.mutable_tensors(0)->mutable_chunks(0);
  c->set_codec(static_cast<uint32_t>(format::Codec::kXorByteGroupZstd));
  c->set_base_id(remote_base.ToBytes());
  ASSERT_TRUE(meta_->CommitShard(m, true).ok());
  auto live = meta_->LiveChunks("job");
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(*live, (ChunkIdSet{c1, c2, remote, remote_base}));
}

TEST_F(MetaStoreTest, SweepKeepsLiveChunksTheirBasesAndYoungChunks) {
  auto put = [&](uint64_t n, int64_t written,
                 std::optional<format::ChunkId> base = std::nullopt) {
    format::ChunkId id{n, n};
    ChunkMeta cm;
    cm.location = {1, n * 4096, 4096};
    cm.raw_length = 4096;
    cm.stored_length = 1000 + n;
    cm.codec = base ? format::Codec::kXorByteGroupZstd : format::Codec::kZstd;
    cm.base = base;
    cm.written_unix_ms = written;
    EXPECT_TRUE(meta_->PutChunk("other", id, cm).ok());
    return id;
  };
  auto c1 = put(1, 1);
  auto c2 = put(2, 1, c1);  // delta on c1
  auto c3 = put(3, 1, c2);  // delta on c2
  auto c4 = put(4, 1);
  auto c5 = put(5, 0);  // written just now
  auto r = meta_->Sweep("other", ChunkIdSet{c3}, 60 * 1000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chunks_deleted, 1u);
  EXPECT_EQ(r->bytes_freed, 1004u);
  for (auto id : {c1, c2, c3, c5}) {
    EXPECT_TRUE(meta_->GetChunk("other", id).ok()) << id.ToHex();
  }
  EXPECT_EQ(meta_->GetChunk("other", c4).status().code(),
            absl::StatusCode::kNotFound);

  // Where the job has steps, its own gc decides: a sweep is refused.
  auto id = StoreChunk(1);
  ASSERT_TRUE(meta_->CommitShard(Shard(1, 0, 1, id)).ok());
  Status s = meta_->Sweep("job", ChunkIdSet{}, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(meta_->GetChunk("job", id).ok());
  EXPECT_EQ(meta_->Sweep("a b", {}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(meta_->Sweep("other", {}, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Power loss under RocksDB (its files through the fault-injecting file
// system): an index entry written unsynced lasts only where a synced write
// came after it, which is what a commit's synced batch is for.
TEST_F(MetaStoreTest, AnUnsyncedEntryLastsOnlyWithASyncedWriteAfterIt) {
  meta_.reset();
  std::filesystem::remove_all(dir_);
  bool active = true;
  auto fs = std::make_shared<server_internal::FaultInjectionRocksFs>(
      [&active] { return active; });
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  auto m = MetaStore::Open(dir_.string(), env.get());
  ASSERT_TRUE(m.ok()) << m.status();
  meta_ = std::move(*m);
  const format::ChunkId before = StoreChunk(1);
  ASSERT_TRUE(meta_->MarkDrained("job", 7).ok());  // synced
  const format::ChunkId after = StoreChunk(2);
  EXPECT_TRUE(meta_->GetChunk("job", after).ok());
  active = false;  // the process dies; RocksDB closes on a dead disk
  meta_.reset();
  active = true;
  ASSERT_TRUE(fs->DropUnsyncedData().ok());

  m = MetaStore::Open(dir_.string(), env.get());
  ASSERT_TRUE(m.ok()) << m.status();
  meta_ = std::move(*m);
  EXPECT_TRUE(meta_->GetChunk("job", before).ok());
  auto drained = meta_->DrainedSteps("job");
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_EQ(*drained, std::set<int64_t>{7});
  EXPECT_EQ(meta_->GetChunk("job", after).status().code(),
            absl::StatusCode::kNotFound);
  meta_.reset();  // before the env goes
}

}  // namespace
}  // namespace stagger::server
