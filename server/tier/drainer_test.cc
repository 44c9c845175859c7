// Drainer over real stores (RocksDB and segments in a temp dir) into a
// MemoryObjectStore: what a drained step leaves in the store and in which
// order, that nothing is written twice, and what an unreachable store does.
#include "server/tier/drainer.h"

#include <gtest/gtest.h>

#include <vector>

#include "format/record.h"
#include "server/testing/indexed_stores.h"
#include "server/tier/cold_gc.h"
#include "server/tier/cold_read.h"
#include "server/tier/layout.h"
#include "server/tier/memory_object_store.h"

namespace stagger::server::tier {
namespace {

using server_internal::BytesOf;

constexpr char kJob[] = "job";
constexpr size_t kFloats = 4096;  // 16 KiB chunks

std::vector<float> Floats(float start) {
  std::vector<float> v(kFloats);
  for (size_t i = 0; i < kFloats; ++i) v[i] = start + 0.001f * i;
  return v;
}

class DrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(stores_.Open());
    meta_ = stores_.meta();
    segments_ = stores_.segments();
  }
  void TearDown() override { stores_.Close(); }

  // Stores `raw` whole (zstd) or, with `base`, as an XOR delta of it.
  format::ChunkId Put(const std::vector<float>& raw,
                      const std::vector<float>* base = nullptr) {
    return base == nullptr
               ? stores_.Put(kJob, BytesOf(raw), format::Codec::kZstd)
               : stores_.Put(kJob, BytesOf(raw),
                             format::Codec::kXorByteGroupZstd, BytesOf(*base));
  }

  // Commits `step` on one rank with one tensor of `chunks`.
  void Commit(int64_t step, const std::vector<format::ChunkId>& chunks) {
    pb::ShardManifest m;
    m.set_job(kJob);
    m.set_step(step);
    m.set_rank(0);
    m.set_world_size(1);
    m.set_chunk_size(kFloats * 4);
    auto* t = m.add_tensors();
    t->set_name("w");
    t->set_dtype("F32");
    t->add_shape(static_cast<int64_t>(chunks.size() * kFloats));
    t->set_byte_size(chunks.size() * kFloats * 4);
    for (const format::ChunkId& id : chunks) {
      auto* c = t->add_chunks();
      c->set_id(id.ToBytes());
      c->set_raw_length(kFloats * 4);
    }
    auto info = meta_->CommitShard(m);
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_TRUE(info->complete());
  }

  Drainer MakeDrainer() {
    DrainerOptions o;
    o.parallel = 2;
    return Drainer(meta_, segments_, &store_, o);
  }

  bool Has(const ObjectName& o) {
    auto size = store_.Size(o);
    return size.ok() && size->has_value();
  }

  server_internal::IndexedStores stores_;
  MetaStore* meta_ = nullptr;
  SegmentStore* segments_ = nullptr;
  MemoryObjectStore store_;
};

TEST_F(DrainerTest, AStepLeavesItsChunksManifestsAndStepObject) {
  const auto a = Floats(1), b = Floats(2);
  const format::ChunkId ia = Put(a), ib = Put(b, &a);  // b: delta of a
  Commit(7, {ib});  // the step uses only the delta
  Drainer d = MakeDrainer();
  ASSERT_TRUE(d.DrainOnce().ok());
  // The delta's base went too, though no manifest names it.
  EXPECT_TRUE(Has(ChunkObject(kJob, ia)));
  EXPECT_TRUE(Has(ChunkObject(kJob, ib)));
  EXPECT_TRUE(Has(ManifestObject(kJob, 7, 0)));
  auto step = store_.Get(StepObject(kJob, 7));
  ASSERT_TRUE(step.ok()) << step.status();
  pb::StepInfo info;
  ASSERT_TRUE(info.ParseFromString(*step));
  EXPECT_EQ(info.step(), 7);
  EXPECT_EQ(*meta_->DrainedSteps(kJob), std::set<int64_t>{7});
  // The chunk object is the record as stored, and verifies.
  auto rec = store_.Get(ChunkObject(kJob, ib));
  ASSERT_TRUE(rec.ok());
  auto h = format::DecodeRecordHeader(*rec);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->codec, format::Codec::kXorByteGroupZstd);
  EXPECT_TRUE(format::VerifyPayload(
                  *h, std::string_view(*rec).substr(format::kRecordHeaderSize))
                  .ok());
  const DrainerStats s = d.stats();
  EXPECT_EQ(s.steps_drained, 1u);
  EXPECT_EQ(s.chunks_written, 2u);
  EXPECT_EQ(s.steps_behind, 0u);
  EXPECT_EQ(store_.puts(), 4u);  // 2 chunks, 1 manifest, 1 step
}

TEST_F(DrainerTest, SharedChunksAreWrittenOnceAndDrainedStepsNotAgain) {
  const auto a = Floats(1), b = Floats(2), c = Floats(3);
  const format::ChunkId ia = Put(a), ib = Put(b), ic = Put(c);
  Commit(1, {ia, ib});
  Drainer d = MakeDrainer();
  ASSERT_TRUE(d.DrainOnce().ok());
  const uint64_t after_first = store_.puts();
  Commit(2, {ia, ic});  // a unchanged
  ASSERT_TRUE(d.DrainOnce().ok());
  EXPECT_EQ(store_.puts(), after_first + 3);  // c, a manifest, a step
  ASSERT_TRUE(d.DrainOnce().ok());
  EXPECT_EQ(store_.puts(), after_first + 3);
  // A new drainer (a restart) knows nothing in memory: a chunk already in
  // the store costs a stat, not a write.
  const auto e = Floats(5);
  Commit(3, {ia, ib, Put(e)});
  Drainer again = MakeDrainer();
  ASSERT_TRUE(again.DrainOnce().ok());
  EXPECT_EQ(store_.puts(), after_first + 6);
  EXPECT_EQ(again.stats().chunks_present, 2u);
  EXPECT_EQ(*meta_->DrainedSteps(kJob), (std::set<int64_t>{1, 2, 3}));
}

TEST_F(DrainerTest, AnObjectInTheStoreIsNeverWrittenOver) {
  Drainer d = MakeDrainer();  // started before the chunk is written
  const format::ChunkId ia = Put(Floats(1));
  Commit(1, {ia});
  // Another server's drain (or an earlier run) stored it already.
  ASSERT_TRUE(store_.Put(ChunkObject(kJob, ia), "theirs").ok());
  const uint64_t puts = store_.puts();
  ASSERT_TRUE(d.DrainOnce().ok());
  EXPECT_EQ(*store_.Get(ChunkObject(kJob, ia)), "theirs");
  EXPECT_EQ(store_.puts(), puts + 2);  // the manifest and the step
  EXPECT_EQ(d.stats().chunks_present, 1u);
  EXPECT_EQ(d.stats().chunks_written, 0u);
}

TEST_F(DrainerTest, AnUnreachableStoreLeavesTheStepBehindUntilItIsBack) {
  Commit(1, {Put(Floats(1))});
  Commit(2, {Put(Floats(2))});
  store_.SetReachable(false);
  Drainer d = MakeDrainer();
  Status s = d.DrainOnce();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  DrainerStats st = d.stats();
  EXPECT_EQ(st.steps_behind, 2u);
  EXPECT_GT(st.oldest_behind_unix_ms, 0);
  EXPECT_NE(st.last_error.find("unreachable"), std::string::npos);
  EXPECT_EQ(st.failed_passes, 1u);
  EXPECT_TRUE(meta_->DrainedSteps(kJob)->empty());
  EXPECT_FALSE(Has(StepObject(kJob, 1)));
  store_.SetReachable(true);
  ASSERT_TRUE(d.DrainOnce().ok());
  st = d.stats();
  EXPECT_EQ(st.steps_behind, 0u);
  EXPECT_EQ(st.last_error, "");
  EXPECT_TRUE(Has(StepObject(kJob, 1)));
  EXPECT_TRUE(Has(StepObject(kJob, 2)));
}

TEST_F(DrainerTest, TheThreadDrainsNewStepsAndWaitsOutAnOutage) {
  DrainerOptions o;
  o.min_backoff_ms = 20;
  o.max_backoff_ms = 40;
  o.poll_ms = 50;
  Drainer d(meta_, segments_, &store_, o);
  store_.SetReachable(false);
  Commit(1, {Put(Floats(1))});
  d.Start();
  EXPECT_FALSE(d.WaitDrained(absl::Milliseconds(300)));
  EXPECT_GE(d.stats().failed_passes, 2u);  // it kept trying
  store_.SetReachable(true);
  ASSERT_TRUE(d.WaitDrained(absl::Seconds(10)));
  EXPECT_TRUE(Has(StepObject(kJob, 1)));
  Commit(2, {Put(Floats(2))});
  d.Notify();
  ASSERT_TRUE(d.WaitDrained(absl::Seconds(10)));
  EXPECT_TRUE(Has(StepObject(kJob, 2)));
  d.Stop();
}

TEST_F(DrainerTest, ARateCapSpreadsTheWrites) {
  std::vector<format::ChunkId> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(Put(Floats(10 + i)));
  Commit(1, ids);
  DrainerOptions o;
  o.bytes_per_s = 1 << 20;  // records of ~16 KiB: 8 in about 0.1 s
  Drainer d(meta_, segments_, &store_, o);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(d.DrainOnce().ok());
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  // At least the bytes written at the cap, less the first record's.
  const double floor =
      static_cast<double>(store_.bytes_put() - (16 << 10)) / (1 << 20);
  EXPECT_GE(took, floor * 0.9) << store_.bytes_put() << " bytes";
}

TEST_F(DrainerTest, KeepLeavesTheNewestStepsAndTheBasesTheyNeed) {
  const auto a = Floats(1), b = Floats(2), c = Floats(3), d = Floats(4);
  const format::ChunkId ia = Put(a), ib = Put(b, &a), ic = Put(c), id = Put(d);
  Commit(1, {ia});
  Commit(2, {ic});
  Commit(3, {ib});  // a delta of a: a stays while step 3 does
  Commit(4, {id});
  DrainerOptions o;
  o.keep = 2;
  o.grace_s = 0;
  Drainer dr(meta_, segments_, &store_, o);
  ASSERT_TRUE(dr.DrainOnce().ok());
  for (int64_t step : {1, 2}) {
    EXPECT_FALSE(Has(StepObject(kJob, step))) << step;
    EXPECT_FALSE(Has(ManifestObject(kJob, step, 0))) << step;
  }
  for (int64_t step : {3, 4}) {
    EXPECT_TRUE(Has(StepObject(kJob, step))) << step;
    EXPECT_TRUE(Has(ManifestObject(kJob, step, 0))) << step;
  }
  EXPECT_TRUE(Has(ChunkObject(kJob, ia)));  // the base of b
  EXPECT_TRUE(Has(ChunkObject(kJob, ib)));
  EXPECT_FALSE(Has(ChunkObject(kJob, ic)));  // only step 2 used it
  EXPECT_TRUE(Has(ChunkObject(kJob, id)));
  const DrainerStats st = dr.stats();
  EXPECT_EQ(st.gc_steps_deleted, 2u);
  EXPECT_EQ(st.gc_chunks_deleted, 1u);
  EXPECT_GT(st.gc_bytes_freed, 0u);
  // The disk keeps all four: retention there is --keep-last's.
  EXPECT_EQ(meta_->ListSteps(kJob, false)->size(), 4u);
}

TEST_F(DrainerTest, UnneededChunksWrittenWithinTheGraceStay) {
  const format::ChunkId ia = Put(Floats(1)), ib = Put(Floats(2));
  Commit(1, {ia});
  Commit(2, {ib});
  Drainer dr = MakeDrainer();
  ASSERT_TRUE(dr.DrainOnce().ok());
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  auto r = GcColdJob(&store_, kJob, 1, 600, now);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps_deleted, std::vector<int64_t>{1});
  EXPECT_EQ(r->chunks_deleted, 0u);
  EXPECT_EQ(r->grace_kept, 1u);
  EXPECT_TRUE(Has(ChunkObject(kJob, ia)));
  // Past its grace it goes.
  ASSERT_TRUE(store_.SetWrittenAt(ChunkObject(kJob, ia), now - 601));
  r = GcColdJob(&store_, kJob, 1, 600, now);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chunks_deleted, 1u);
  EXPECT_FALSE(Has(ChunkObject(kJob, ia)));
  EXPECT_TRUE(Has(ChunkObject(kJob, ib)));
  EXPECT_EQ(GcColdJob(&store_, kJob, 0, 600, now).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A server that knows steps only from the pool (imported on an empty
// disk) forgets those another server's retention deletes there: no step is
// listed with its bytes gone.
TEST_F(DrainerTest, StepsThePoolDropsLeaveTheServerThatImportedThem) {
  Commit(1, {Put(Floats(1))});
  Commit(2, {Put(Floats(2))});
  ASSERT_TRUE(MakeDrainer().DrainOnce().ok());
  server_internal::IndexedStores fresh;
  ASSERT_NO_FATAL_FAILURE(fresh.Open());
  auto imported = ImportColdSteps(fresh.meta(), &store_);
  ASSERT_TRUE(imported.ok()) << imported.status();
  ASSERT_EQ(fresh.meta()->ListSteps(kJob, false)->size(), 2u);
  Drainer importer(fresh.meta(), fresh.segments(), &store_, DrainerOptions());
  ASSERT_TRUE(importer.DrainOnce().ok());
  EXPECT_EQ(fresh.meta()->ListSteps(kJob, false)->size(), 2u);
  EXPECT_EQ(importer.stats().cold_steps_forgotten, 0u);

  // The first server drains step 3 keeping one step: 1 and 2 go.
  Commit(3, {Put(Floats(3))});
  DrainerOptions o;
  o.keep = 1;
  o.grace_s = 0;
  ASSERT_TRUE(Drainer(meta_, segments_, &store_, o).DrainOnce().ok());
  ASSERT_FALSE(Has(StepObject(kJob, 2)));
  Status second = importer.DrainOnce();
  ASSERT_TRUE(second.ok()) << second;
  auto steps = fresh.meta()->ListSteps(kJob, false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_TRUE(steps->empty()) << steps->size() << " still listed";
  EXPECT_EQ(importer.stats().cold_steps_forgotten, 2u);
  // The first server keeps all three on its disk.
  EXPECT_EQ(meta_->ListSteps(kJob, false)->size(), 3u);
  fresh.Close();
}

// Import brings in what other servers drained after this one started
// (counted in its stats); a step a deletion holds off (rm between its
// disk and store deletes) waits for the next import; one refused is not
// read again.
TEST_F(DrainerTest, ImportsWhatOthersDrainedAndWaitsForADeletion) {
  server_internal::IndexedStores other;
  ASSERT_NO_FATAL_FAILURE(other.Open());
  Drainer here(other.meta(), other.segments(), &store_, DrainerOptions());
  Commit(1, {Put(Floats(1))});
  ASSERT_TRUE(MakeDrainer().DrainOnce().ok());
  {
    Drainer::DeletionScope deleting(&here);
    auto held_off = here.Import();
    ASSERT_TRUE(held_off.ok()) << held_off.status();
    EXPECT_EQ(held_off->steps, 0u);
    EXPECT_EQ(held_off->deferred, 1u);
  }
  auto imported = here.Import();
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->steps, 1u);
  EXPECT_EQ(here.stats().cold_steps_imported, 1u);
  EXPECT_TRUE(other.meta()->GetStep(kJob, 1).ok());

  // A step object that is not a step: left out once, not read again.
  ASSERT_TRUE(store_.Put(StepObject(kJob, 7), "not a step").ok());
  auto bad = here.Import();
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->refused, 1u);
  const uint64_t gets = store_.gets();
  bad = here.Import();
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->refused, 0u);
  EXPECT_EQ(store_.gets(), gets);
  other.Close();
}

// A drained chunk read back: with its exact size in one read, with a size
// hint that falls short (a chunk re-encoded since the reader's manifest)
// in two, whole either way, into a pooled buffer when given one.
TEST_F(DrainerTest, ColdReadsTakeASizeAndReadAgainWhenItFallsShort) {
  const auto a = Floats(1);
  const format::ChunkId ia = Put(a);
  Commit(1, {ia});
  ASSERT_TRUE(MakeDrainer().DrainOnce().ok());
  auto object = store_.Get(ChunkObject(kJob, ia));
  ASSERT_TRUE(object.ok()) << object.status();
  const std::string payload = object->substr(format::kRecordHeaderSize);
  auto pool = transport::BufferPool::Create(16 << 20);

  uint64_t gets = store_.gets();
  auto exact = ReadColdChunk(&store_, kJob, ia, object->size(), pool.get());
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->payload.view(), payload);
  EXPECT_EQ(store_.gets(), gets + 1);

  gets = store_.gets();
  auto hinted = ReadColdChunk(&store_, kJob, ia, format::kRecordHeaderSize + 10,
                              pool.get());
  ASSERT_TRUE(hinted.ok()) << hinted.status();
  EXPECT_EQ(hinted->payload.view(), payload);
  EXPECT_EQ(store_.gets(), gets + 2);

  auto unsized = ReadColdChunk(&store_, kJob, ia);
  ASSERT_TRUE(unsized.ok()) << unsized.status();
  EXPECT_EQ(unsized->payload.view(), payload);
}

}  // namespace
}  // namespace stagger::server::tier
