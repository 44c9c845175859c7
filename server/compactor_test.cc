// Compactor over real stores (RocksDB in a temp dir, segments through the
// fault-injection file system): what it reclaims, what it keeps bit-exact,
// and what a crash between its steps leaves behind.
#include "server/compactor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "server/chunk_read.h"
#include "server/storage/fault_injection_file_system.h"
#include "server/storage/internal/segment_files.h"
#include "server/storage/testing/test_util.h"

namespace stagger::server {
namespace {

using storage_internal::AppendSync;
using storage_internal::MakeRecord;
using storage_internal::TempDir;
using storage_internal::TestRecord;
using CrashMode = FaultInjectionFileSystem::CrashMode;

constexpr char kJob[] = "job";

struct DirUsage {
  size_t files = 0;
  uint64_t bytes = 0;
  uint64_t max_id = 0;
};

class CompactorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    auto base = NewDefaultFileSystem(8);
    ASSERT_TRUE(base.ok());
    base_ = std::move(*base);
    fs_ = std::make_unique<FaultInjectionFileSystem>(base_.get());
    Open();
  }
  void TearDown() override { Close(); }

  void Open(CompactorOptions co = Defaults()) {
    auto meta = MetaStore::Open(dir_.path() + "/meta");
    ASSERT_TRUE(meta.ok()) << meta.status();
    meta_ = std::move(*meta);
    SegmentStoreOptions so;
    so.dir = dir_.path() + "/segments";
    so.fs = fs_.get();
    so.segment_bytes = 64 << 10;
    // Directory sizes are compared byte for byte below; without this the
    // open segment's file would be its reservation, not its records.
    so.preallocate_bytes = 0;
    so.max_batch_bytes = 1 << 20;
    so.queue_depth = 4;
    auto segments = SegmentStore::Open(so);
    ASSERT_TRUE(segments.ok()) << segments.status();
    segments_ = std::move(*segments);
    auto c = Compactor::Create(segments_.get(), meta_.get(), std::move(co));
    ASSERT_TRUE(c.ok()) << c.status();
    compactor_ = std::move(*c);
  }
  void Close() {
    compactor_.reset();
    segments_.reset();
    meta_.reset();
  }
  // Simulated power loss: every store closed, unsynced bytes dropped.
  void Crash() {
    Close();
    ASSERT_TRUE(fs_->DropUnsyncedData(CrashMode::kTornTail, 7).ok());
  }
  static CompactorOptions Defaults() {
    CompactorOptions co;
    // A 64 KiB segment holds at least four 4..16 KiB records, so after
    // CommitFourSteps and gc --keep 1 at most ~73% of one is live.
    co.threshold = 0.8;
    co.bytes_per_s = 0;
    co.batch_bytes = 40 << 10;  // several index updates per segment
    return co;
  }

  // Appends `n` random records of 1..12 KiB and indexes them.
  void PutChunks(int n, const std::string& job = kJob,
                 RecordLifetime lifetime = RecordLifetime::kLong) {
    for (int i = 0; i < n; ++i) {
      TestRecord r = MakeRecord(rng_, 1 + rng_() % (12 << 10));
      auto loc = AppendSync(segments_.get(), job, r, lifetime);
      ASSERT_TRUE(loc.ok()) << loc.status();
      Index(job, r, *loc);
    }
  }
  void Index(const std::string& job, TestRecord& r, const ChunkLocation& loc) {
    ChunkMeta m;
    m.location = loc;
    m.raw_length = r.header.raw_length;
    m.stored_length = r.header.encoded_length;
    m.codec = r.header.codec;
    ASSERT_TRUE(meta_->PutChunk(job, r.header.chunk_id, m).ok());
    order_.push_back(r.header.chunk_id);
    records_[r.header.chunk_id] = std::move(r);
  }

  // Commits step s (one rank) referencing every chunk i with i % 4 == s - 1,
  // so each segment holds chunks of all four steps.
  void CommitFourSteps() {
    for (int step = 1; step <= 4; ++step) {
      pb::ShardManifest m;
      m.set_job(kJob);
      m.set_step(step);
      m.set_rank(0);
      m.set_world_size(1);
      m.set_chunk_size(64 << 10);
      uint64_t bytes = 0;
      auto* t = m.add_tensors();
      t->set_name("t");
      t->set_dtype("U8");
      for (size_t i = step - 1; i < order_.size(); i += 4) {
        const TestRecord& r = records_[order_[i]];
        auto* c = t->add_chunks();
        c->set_id(r.header.chunk_id.ToBytes());
        c->set_raw_length(r.header.raw_length);
        bytes += r.header.raw_length;
      }
      t->add_shape(static_cast<int64_t>(bytes));
      t->set_byte_size(bytes);
      auto info = meta_->CommitShard(m);
      ASSERT_TRUE(info.ok()) << info.status();
    }
  }

  // The chunks step 4 references (those gc --keep 1 keeps).
  std::string SegPath(uint64_t id) const {
    return dir_.path() + "/segments/job/" +
           storage_internal::SegmentFileName(id);
  }

  std::vector<format::ChunkId> Kept() const {
    std::vector<format::ChunkId> out;
    for (size_t i = 3; i < order_.size(); i += 4) out.push_back(order_[i]);
    return out;
  }

  void ExpectReadsBack(const std::vector<format::ChunkId>& ids,
                       const std::string& job = kJob) {
    for (const auto& id : ids) {
      auto rec = ReadChunk(meta_.get(), segments_.get(), job, id);
      ASSERT_TRUE(rec.ok()) << id.ToHex() << ": " << rec.status();
      EXPECT_EQ(rec->payload.view(), records_.at(id).payload) << id.ToHex();
    }
  }

  DirUsage Usage(const std::string& job = kJob) const {
    DirUsage u;
    for (const auto& e : std::filesystem::directory_iterator(
             dir_.path() + "/segments/" + job)) {
      ++u.files;
      u.bytes += e.file_size();
      u.max_id =
          std::max<uint64_t>(u.max_id, std::stoull(e.path().stem().string()));
    }
    return u;
  }

  TempDir dir_;
  std::unique_ptr<FileSystem> base_;
  std::unique_ptr<FaultInjectionFileSystem> fs_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<SegmentStore> segments_;
  std::unique_ptr<Compactor> compactor_;
  std::mt19937_64 rng_{42};
  std::vector<format::ChunkId> order_;
  std::map<format::ChunkId, TestRecord> records_;
};

TEST_F(CompactorTest, GcThenCompactShrinksAndKeepsEveryLiveChunk) {
  PutChunks(48);
  CommitFourSteps();
  const DirUsage before = Usage();
  ASSERT_GE(before.files, 6u);
  auto gc = meta_->Gc(kJob, 1, 0);
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_EQ(gc->chunks_deleted, 36u);

  auto r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  // Every sealed segment was three-quarters dead; the open one stays.
  EXPECT_EQ(r->segments_removed, before.files - 1);
  EXPECT_GT(r->records_copied, 0u);
  EXPECT_LE(r->records_copied, 12u);
  const DirUsage after = Usage();
  EXPECT_LT(after.files, before.files);
  EXPECT_LT(after.bytes, before.bytes / 2);
  EXPECT_EQ(before.bytes - r->bytes_reclaimed + r->bytes_copied, after.bytes);
  EXPECT_TRUE(std::filesystem::exists(SegPath(before.max_id)));
  ExpectReadsBack(Kept());
  for (size_t i = 0; i < order_.size(); i += 4) {
    EXPECT_EQ(meta_->GetChunk(kJob, order_[i]).status().code(),
              absl::StatusCode::kNotFound);
  }
  for (uint64_t id = 1; id < before.max_id; ++id) {
    EXPECT_FALSE(std::filesystem::exists(SegPath(id))) << id;
  }
  // The segment that was open is compacted once the copies sealed it;
  // then there is nothing left to do. And it all survives a reopen.
  auto again = compactor_->CompactJob(kJob);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_LE(again->segments_removed, 1u);
  again = compactor_->CompactJob(kJob);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->segments_removed, 0u);
  EXPECT_EQ(again->records_copied, 0u);
  Close();
  Open();
  ExpectReadsBack(Kept());
}

TEST_F(CompactorTest, TheSegmentBeingAppendedToIsRetiredBeforeItIsRemoved) {
  PutChunks(2);  // both in segment 1, still open
  ASSERT_EQ(Usage().files, 1u);
  ChunkIdSet none;
  auto swept = meta_->Sweep(kJob, none, 0);
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(swept->chunks_deleted, 2u);
  auto sealed = segments_->ListSealedSegments(kJob);
  ASSERT_TRUE(sealed.ok());
  EXPECT_TRUE(sealed->empty());
  EXPECT_EQ(segments_->RemoveSegment(kJob, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  // Nothing live, so small as it is, it is rolled over and removed without
  // copying; the next append opens a new segment.
  auto r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->segments_rolled, 1u);
  EXPECT_EQ(r->segments_removed, 1u);
  EXPECT_EQ(r->records_copied, 0u);
  EXPECT_EQ(Usage().files, 0u);
  PutChunks(1);
  EXPECT_EQ(Usage().max_id, 2u);
  // A later run's segments are new: the old ones are sealed, and once
  // empty of live records removed without copying.
  Close();
  Open();
  PutChunks(1);
  ASSERT_TRUE(meta_->Sweep(kJob, ChunkIdSet{order_.back()}, 0).ok());
  r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->segments_removed, 1u);
  EXPECT_EQ(r->records_copied, 0u);
  ExpectReadsBack({order_.back()});
}

TEST_F(CompactorTest, AMostlyDeadOpenSegmentIsRolledOverAndReclaimed) {
  CompactorOptions co = Defaults();
  co.min_roll_bytes = 16 << 10;
  Close();
  Open(co);
  PutChunks(3);  // in segment 1, still open (segments hold 64 KiB)
  ASSERT_EQ(Usage().files, 1u);
  const uint64_t before = Usage().bytes;
  ChunkIdSet keep = {order_.back()};
  auto swept = meta_->Sweep(kJob, keep, 0);
  ASSERT_TRUE(swept.ok()) << swept.status();
  ASSERT_EQ(swept->chunks_deleted, 2u);
  auto r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->segments_rolled, 1u);
  EXPECT_EQ(r->segments_removed, 1u);
  EXPECT_EQ(r->records_copied, 1u);
  EXPECT_LT(Usage().bytes, before);
  EXPECT_EQ(Usage().files, 1u);  // the copy's segment, open
  ExpectReadsBack({order_.back()});
  // New appends go on in the new segment; a dense one is not rolled.
  PutChunks(2);
  r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->segments_rolled, 0u);
  EXPECT_EQ(r->segments_removed, 0u);
  ExpectReadsBack(
      std::vector<format::ChunkId>(order_.begin() + 2, order_.end()));
}

// What saves stored dies a segment at a time once replaced: a reclaim pass
// removes the sealed segments the index names nothing in, copying nothing,
// and leaves one with a live record and the open one alone.
TEST_F(CompactorTest, AReclaimPassRemovesEmptiedSegmentsWithoutCopying) {
  PutChunks(40, kJob, RecordLifetime::kSaved);  // 64 KiB segments
  const DirUsage before = Usage();
  ASSERT_GE(before.files, 3u);
  // Keep the first chunk (in segment 1) and the last (in the open one).
  ChunkIdSet keep = {order_.front(), order_.back()};
  ASSERT_TRUE(meta_->Sweep(kJob, keep, 0).ok());
  auto r = compactor_->CompactJob(kJob, /*reclaim_only=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records_copied, 0u);
  EXPECT_EQ(r->segments_rolled, 0u);
  EXPECT_EQ(r->segments_removed, before.files - 2);
  EXPECT_EQ(Usage().files, 2u);
  EXPECT_TRUE(std::filesystem::exists(SegPath(1)));
  ExpectReadsBack({order_.front(), order_.back()});
}

// A full pass retires the open short-lived segments (from min_roll_bytes
// on), so the next save's records go to segments of their own; the
// long-lived one stays open. A step's completion asks for the same.
TEST_F(CompactorTest, APassRetiresTheShortLivedSegmentsAndKeepsTheLongOne) {
  CompactorOptions co = Defaults();
  co.min_roll_bytes = 8 << 10;
  Close();
  Open(co);
  PutChunks(1, kJob, RecordLifetime::kLong);
  TestRecord r = MakeRecord(rng_, 10 << 10);
  auto saved = AppendSync(segments_.get(), kJob, r, RecordLifetime::kSaved);
  ASSERT_TRUE(saved.ok());
  Index(kJob, r, *saved);
  auto pass = compactor_->CompactJob(kJob);
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->segments_rolled, 1u);
  EXPECT_EQ(pass->segments_removed, 0u);
  auto sealed = segments_->ListSealedSegments(kJob);
  ASSERT_TRUE(sealed.ok());
  ASSERT_EQ(sealed->size(), 1u);
  EXPECT_EQ((*sealed)[0].id, saved->segment);
  TestRecord r2 = MakeRecord(rng_, 10 << 10);
  auto next = AppendSync(segments_.get(), kJob, r2, RecordLifetime::kSaved);
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->segment, saved->segment);

  compactor_->StepComplete(kJob);
  TestRecord r3 = MakeRecord(rng_, 10 << 10);
  auto after = AppendSync(segments_.get(), kJob, r3, RecordLifetime::kSaved);
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->segment, next->segment);
  ExpectReadsBack({order_.front(), order_.back()});
}

// A writer that indexes its records after appending them (the rebaser)
// holds removals off: its record's segment, sealed and unnamed until the
// index names it, is not removed by a pass that runs meanwhile.
TEST_F(CompactorTest, ARecordBeingIndexedKeepsItsSegment) {
  TestRecord r = MakeRecord(rng_, 10 << 10);
  std::thread pass;
  Result<CompactionStats> result = absl::UnknownError("not run");
  {
    Compactor::RemovalHold hold = compactor_->HoldRemovals();
    auto loc = AppendSync(segments_.get(), kJob, r, RecordLifetime::kRebased);
    ASSERT_TRUE(loc.ok()) << loc.status();
    ASSERT_TRUE(segments_->Roll(kJob).ok());  // sealed, nothing indexed
    pass = std::thread(
        [&] { result = compactor_->CompactJob(kJob, /*reclaim_only=*/true); });
    Index(kJob, r, *loc);
  }
  pass.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->segments_removed, 0u);
  ExpectReadsBack({order_.back()});
}

TEST_F(CompactorTest, DenseSegmentsAreLeftAlone) {
  PutChunks(24);
  const DirUsage before = Usage();
  auto r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->segments_removed, 0u);
  EXPECT_EQ(r->bytes_copied, 0u);
  EXPECT_EQ(Usage().bytes, before.bytes);
}

// Segments that each stay above the threshold still add up: a third of
// every segment dead is 1.5x the live bytes on disk. The space bound picks
// the emptiest until the job is back under it; without it nothing moves.
TEST_F(CompactorTest, SpaceAmplificationBoundCompactsTheEmptiestSegments) {
  for (double amp : {0.0, 1.2}) {
    SCOPED_TRACE(amp);
    const std::string job = amp == 0 ? "unbounded" : "bounded";
    CompactorOptions co = Defaults();
    co.threshold = 0.3;
    co.max_space_amp = amp;
    Close();
    Open(co);
    order_.clear();
    PutChunks(60, job);
    ChunkIdSet keep;
    for (size_t i = 0; i < order_.size(); ++i) {
      if (i % 3 != 0) keep.insert(order_[i]);
    }
    auto swept = meta_->Sweep(job, keep, 0);
    ASSERT_TRUE(swept.ok()) << swept.status();
    ASSERT_EQ(swept->chunks_deleted, 20u);
    uint64_t live = 0;
    ASSERT_TRUE(
        meta_
            ->ForEachChunk(job,
                           [&](const format::ChunkId&, const ChunkMeta& m) {
                             live += m.location.record_size;
                           })
            .ok());
    const uint64_t before = Usage(job).bytes;
    ASSERT_GT(before, live * 13 / 10);
    auto r = compactor_->CompactJob(job);
    ASSERT_TRUE(r.ok()) << r.status();
    if (amp == 0) {
      EXPECT_EQ(r->segments_removed, 0u);
      EXPECT_EQ(Usage(job).bytes, before);
    } else {
      EXPECT_GT(r->segments_removed, 0u);
      EXPECT_GT(r->records_copied, 0u);
      EXPECT_LE(Usage(job).bytes, live * 12 / 10);
      // Less than everything: the bound, not a rewrite of the job.
      EXPECT_LT(r->bytes_copied, live);
    }
    ExpectReadsBack(std::vector<format::ChunkId>(keep.begin(), keep.end()),
                    job);
  }
}

TEST_F(CompactorTest, ConcurrentGcAndReputAreNotOverwritten) {
  PutChunks(24);
  // Keep every other chunk: every sealed segment is about half dead.
  ChunkIdSet live;
  for (size_t i = 0; i < order_.size(); i += 2) live.insert(order_[i]);
  Close();
  CompactorOptions co = Defaults();
  co.threshold = 0.9;
  const format::ChunkId dropped = order_[0], reput = order_[2];
  ChunkLocation reput_at;
  bool fired = false;
  co.on_step = [&](CompactionStep step, uint64_t segment) -> Status {
    if (step != CompactionStep::kCopied || fired) return absl::OkStatus();
    fired = true;
    // Meanwhile: a gc drops one chunk, and another is deleted and stored
    // again by a client (a new place in the index).
    ChunkIdSet still = live;
    still.erase(dropped);
    STAGGER_RETURN_IF_ERROR(meta_->Sweep(kJob, still, 0).status());
    STAGGER_ASSIGN_OR_RETURN(
        reput_at, AppendSync(segments_.get(), kJob, records_[reput]));
    STAGGER_ASSIGN_OR_RETURN(ChunkMeta m, meta_->GetChunk(kJob, reput));
    m.location = reput_at;
    return meta_->PutChunk(kJob, reput, m);
  };
  Open(co);
  ASSERT_TRUE(meta_->Sweep(kJob, live, 0).ok());
  auto r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(fired);
  EXPECT_GT(r->segments_removed, 0u);
  EXPECT_EQ(meta_->GetChunk(kJob, dropped).status().code(),
            absl::StatusCode::kNotFound);
  auto m = meta_->GetChunk(kJob, reput);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->location == reput_at);
  std::vector<format::ChunkId> kept;
  for (size_t i = 2; i < order_.size(); i += 2) kept.push_back(order_[i]);
  ExpectReadsBack(kept);
}

TEST_F(CompactorTest, ReaderWithStaleLocationFollowsTheMove) {
  PutChunks(48);
  CommitFourSteps();
  ASSERT_TRUE(meta_->Gc(kJob, 1, 0).ok());
  const format::ChunkId id = Kept().front();
  auto stale = meta_->GetChunk(kJob, id);
  ASSERT_TRUE(stale.ok());
  auto r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(segments_->Read(kJob, stale->location).status().code(),
            absl::StatusCode::kNotFound);
  auto rec = ReadChunk(meta_.get(), segments_.get(), kJob, id, *stale);
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->payload.view(), records_[id].payload);
}

TEST_F(CompactorTest, CrashWhileCopyingLeavesTheIndexOnTheOldBytes) {
  PutChunks(48);
  CommitFourSteps();
  ASSERT_TRUE(meta_->Gc(kJob, 1, 0).ok());
  const DirUsage before = Usage();
  fs_->CrashAfterWrites(1);
  auto r = compactor_->CompactJob(kJob);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  Crash();
  Open();
  EXPECT_EQ(Usage().files, before.files);  // nothing removed
  ExpectReadsBack(Kept());
  r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->segments_removed, 0u);
  EXPECT_LT(Usage().bytes, before.bytes / 2);
  ExpectReadsBack(Kept());
}

TEST_F(CompactorTest, CrashAfterCopyBeforeIndexUpdate) {
  PutChunks(48);
  CommitFourSteps();
  ASSERT_TRUE(meta_->Gc(kJob, 1, 0).ok());
  const DirUsage before = Usage();
  Close();
  CompactorOptions co = Defaults();
  co.on_step = [this](CompactionStep step, uint64_t) -> Status {
    if (step != CompactionStep::kCopied) return absl::OkStatus();
    fs_->SetActive(false);  // the process dies here
    return absl::UnavailableError("crash after copy");
  };
  Open(co);
  auto r = compactor_->CompactJob(kJob);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  Crash();
  Open();
  EXPECT_GE(Usage().files, before.files);  // old segments all there
  ExpectReadsBack(Kept());
  r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectReadsBack(Kept());
  EXPECT_LT(Usage().bytes, before.bytes / 2);
}

TEST_F(CompactorTest, CrashAfterIndexUpdateBeforeRemoval) {
  PutChunks(48);
  CommitFourSteps();
  ASSERT_TRUE(meta_->Gc(kJob, 1, 0).ok());
  const DirUsage before = Usage();
  Close();
  CompactorOptions co = Defaults();
  co.on_step = [this](CompactionStep step, uint64_t) -> Status {
    if (step != CompactionStep::kIndexed) return absl::OkStatus();
    fs_->SetActive(false);
    return absl::UnavailableError("crash before removal");
  };
  Open(co);
  auto r = compactor_->CompactJob(kJob);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  Crash();
  Open();
  for (uint64_t id = 1; id < before.max_id; ++id) {
    EXPECT_TRUE(std::filesystem::exists(SegPath(id))) << id;
  }
  ExpectReadsBack(Kept());  // from the copies
  r = compactor_->CompactJob(kJob);
  ASSERT_TRUE(r.ok()) << r.status();
  // The segments sealed before hold nothing live any more: removed. (The
  // one open then may be compacted too, now that it is sealed.)
  EXPECT_GE(r->segments_removed, before.files - 1);
  for (uint64_t id = 1; id < before.max_id; ++id) {
    EXPECT_FALSE(std::filesystem::exists(SegPath(id))) << id;
  }
  EXPECT_LT(Usage().bytes, before.bytes / 2);
  ExpectReadsBack(Kept());
}

TEST_F(CompactorTest, ScheduledPassRunsInTheBackground) {
  PutChunks(48);
  CommitFourSteps();
  ASSERT_TRUE(meta_->Gc(kJob, 1, 0).ok());
  auto ticket = compactor_->Schedule(kJob);
  auto r = ticket->Wait(absl::InfiniteFuture());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->segments_removed, 0u);
  EXPECT_GT(r->bytes_reclaimed, 0u);
  ExpectReadsBack(Kept());
  compactor_->Stop();
  EXPECT_EQ(
      compactor_->Schedule(kJob)->Wait(absl::InfiniteFuture()).status().code(),
      absl::StatusCode::kUnavailable);
}

TEST_F(CompactorTest, BadOptionsAreRefused) {
  for (double t : {0.0, -0.5, 1.5}) {
    CompactorOptions co;
    co.threshold = t;
    EXPECT_EQ(
        Compactor::Create(segments_.get(), meta_.get(), co).status().code(),
        absl::StatusCode::kInvalidArgument)
        << t;
  }
  for (double amp : {-1.0, 0.5, 0.99}) {
    CompactorOptions co;
    co.max_space_amp = amp;
    EXPECT_EQ(
        Compactor::Create(segments_.get(), meta_.get(), co).status().code(),
        absl::StatusCode::kInvalidArgument)
        << amp;
  }
  CompactorOptions co;
  co.batch_bytes = 0;
  EXPECT_EQ(Compactor::Create(segments_.get(), meta_.get(), co).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagger::server
