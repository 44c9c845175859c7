// SegmentStore under injected faults: failed writes and syncs, a full disk,
// and simulated crashes that drop unsynced data.
#include <unistd.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/storage/fault_injection_file_system.h"
#include "server/storage/internal/segment_files.h"
#include "server/storage/segment_store.h"
#include "server/storage/testing/test_util.h"

namespace stagger::server {
namespace {

using storage_internal::AppendSync;
using storage_internal::Collector;
using storage_internal::MakeRecord;
using storage_internal::SegmentFileName;
using storage_internal::TempDir;
using storage_internal::TestRecord;
using CrashMode = FaultInjectionFileSystem::CrashMode;

class SegmentStoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    auto base = NewDefaultFileSystem(8);
    ASSERT_TRUE(base.ok());
    base_ = std::move(*base);
    fs_ = std::make_unique<FaultInjectionFileSystem>(base_.get());
  }
  SegmentStoreOptions Options() {
    SegmentStoreOptions o;
    o.dir = dir_.path();
    o.fs = fs_.get();
    o.segment_bytes = 128 << 10;
    o.max_batch_bytes = 4 << 20;
    o.queue_depth = 8;
    return o;
  }
  std::unique_ptr<SegmentStore> OpenStore() { return OpenStore(Options()); }
  std::unique_ptr<SegmentStore> OpenStore(const SegmentStoreOptions& o) {
    auto s = SegmentStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::string SegPath(const std::string& job, uint64_t id) {
    return JoinPath(JoinPath(dir_.path(), job), SegmentFileName(id));
  }
  static void ExpectReadsBack(SegmentStore* store, const std::string& job,
                              const ChunkLocation& loc, const TestRecord& r) {
    auto got = store->Read(job, loc);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->payload.view(), r.payload);
  }

  TempDir dir_;
  std::unique_ptr<FileSystem> base_;
  std::unique_ptr<FaultInjectionFileSystem> fs_;
};

// Holds the writer thread inside the callback of a first append, so that
// the appends queued meanwhile form exactly one batch.
class WriterGate {
 public:
  AppendCallback Callback() {
    return [this](Result<ChunkLocation> r) {
      first_ = std::move(r);
      entered_.Notify();
      release_.WaitForNotification();
    };
  }
  // Returns once the writer is held.
  void WaitHeld() { entered_.WaitForNotification(); }
  void Release() { release_.Notify(); }
  const Result<ChunkLocation>& first() const { return first_; }

 private:
  absl::Notification entered_;
  absl::Notification release_;
  Result<ChunkLocation> first_ = absl::UnknownError("pending");
};

TEST_F(SegmentStoreFaultTest, FailedWriteFailsWholeBatchThenRecovers) {
  SegmentStoreOptions o = Options();
  o.segment_bytes = 64 << 20;  // the whole batch fits in one segment per job
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(11);
  TestRecord first = MakeRecord(rng, 3000);
  WriterGate gate;
  store->Append("a", first.header, first.Payload(), gate.Callback());
  gate.WaitHeld();
  // 6 records over two jobs, ~2.4 MiB. Job a's segment is written first,
  // in two requests: 1 MiB (the first two records whole, a part of the
  // third) and the rest, which fails.
  std::vector<TestRecord> batch;
  Collector c(6);
  for (int i = 0; i < 6; ++i) {
    batch.push_back(MakeRecord(rng, 400000));
    store->Append(i % 2 ? "b" : "a", batch[i].header, batch[i].Payload(),
                  c.Callback(i));
  }
  fs_->FailNthWrite(2, absl::InternalError("injected EIO"));
  gate.Release();
  c.Wait();
  ASSERT_TRUE(gate.first().ok());
  for (int i = 0; i < 6; ++i) {
    ASSERT_FALSE(c.result(i).ok()) << "record " << i << " acked";
    EXPECT_EQ(c.result(i).status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(c.result(i).status().message().find("injected EIO"),
              std::string::npos);
  }
  // The failed batch's segments are abandoned: the next record of job a
  // starts a new one, and the acknowledged record is intact.
  TestRecord after = MakeRecord(rng, 5000);
  auto loc = AppendSync(store.get(), "a", after);
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->segment, gate.first()->segment + 1);
  EXPECT_EQ(loc->offset, 0u);
  ExpectReadsBack(store.get(), "a", *gate.first(), first);
  ExpectReadsBack(store.get(), "a", *loc, after);
  // Job b's new segment held nothing acknowledged and is gone.
  EXPECT_NE(access(SegPath("b", 1).c_str(), F_OK), 0);
  // Scan of job a reaches both acknowledged records, and stops in segment
  // 1 where the failed batch's bytes end (after two intact but never
  // acknowledged records, which a rebuilt index may keep: they are valid).
  std::set<std::pair<uint64_t, uint64_t>> seen;
  int errors = 0;
  ASSERT_TRUE(store
                  ->Scan(
                      "a",
                      [&](const format::RecordHeader&, const ChunkLocation& l) {
                        seen.insert({l.segment, l.offset});
                      },
                      [&](const Status& e) {
                        ++errors;
                        EXPECT_EQ(e.code(), absl::StatusCode::kDataLoss);
                      })
                  .ok());
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(seen.count({gate.first()->segment, gate.first()->offset}), 1u);
  EXPECT_EQ(seen.count({loc->segment, loc->offset}), 1u);
}

TEST_F(SegmentStoreFaultTest, DiskFullIsResourceExhaustedNamingSegment) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(12);
  TestRecord r0 = MakeRecord(rng, 9000);
  auto l0 = AppendSync(store.get(), "full", r0);
  ASSERT_TRUE(l0.ok());
  fs_->SetNoSpaceAfter(4096);
  auto e1 = AppendSync(store.get(), "full", MakeRecord(rng, 9000));
  EXPECT_EQ(e1.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(e1.status().message().find(SegPath("full", l0->segment)),
            std::string::npos)
      << e1.status();
  // Still full: a fresh segment is tried, fails, and is removed again.
  auto e2 = AppendSync(store.get(), "full", MakeRecord(rng, 9000));
  EXPECT_EQ(e2.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(access(SegPath("full", l0->segment + 1).c_str(), F_OK), 0);
  // Reads keep working on a full disk.
  ExpectReadsBack(store.get(), "full", *l0, r0);
  fs_->ClearNoSpace();
  TestRecord r3 = MakeRecord(rng, 9000);
  auto l3 = AppendSync(store.get(), "full", r3);
  ASSERT_TRUE(l3.ok()) << l3.status();
  EXPECT_EQ(l3->segment, l0->segment + 2);
  ExpectReadsBack(store.get(), "full", *l3, r3);
}

TEST_F(SegmentStoreFaultTest, FailedSyncIsNeverAcknowledged) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(13);
  fs_->FailNextSyncs(1, absl::InternalError("injected fdatasync EIO"));
  auto e = AppendSync(store.get(), "s", MakeRecord(rng, 100));
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
  TestRecord r = MakeRecord(rng, 100);
  auto l = AppendSync(store.get(), "s", r);
  ASSERT_TRUE(l.ok()) << l.status();
  // Segment 1 held nothing acknowledged and was removed.
  EXPECT_EQ(l->segment, 2u);
  EXPECT_NE(access(SegPath("s", 1).c_str(), F_OK), 0);
  ExpectReadsBack(store.get(), "s", *l, r);
}

struct CrashCase {
  uint32_t seed;
  CrashMode mode;
};

class SegmentStoreCrashTest : public SegmentStoreFaultTest,
                              public ::testing::WithParamInterface<CrashCase> {
};

TEST_P(SegmentStoreCrashTest, CrashNeverLosesAcknowledgedRecords) {
  const CrashCase cc = GetParam();
  std::mt19937_64 rng(cc.seed);
  const std::vector<std::string> jobs = {"x", "y"};
  std::vector<TestRecord> recs;
  std::vector<std::string> job_of;
  for (int i = 0; i < 80; ++i) {
    recs.push_back(MakeRecord(rng, rng() % 30000));
    job_of.push_back(jobs[rng() % 2]);
  }
  Collector c(recs.size());
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    // Rounds of 8 appends, each waited for, take 2-4 write requests apiece:
    // the "process" dies part-way, after some rounds were acknowledged.
    fs_->CrashAfterWrites(4 + rng() % 16);
    for (size_t round = 0; round < recs.size(); round += 8) {
      for (size_t i = round; i < round + 8; ++i) {
        store->Append(job_of[i], recs[i].header, recs[i].Payload(),
                      c.Callback(i));
      }
      c.WaitFor(round + 8);
    }
  }
  EXPECT_FALSE(fs_->active());
  size_t acked = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    if (c.result(i).ok()) {
      ++acked;
    } else {
      EXPECT_EQ(c.result(i).status().code(), absl::StatusCode::kUnavailable)
          << c.result(i).status();
    }
  }
  EXPECT_GT(acked, 0u);
  EXPECT_LT(acked, recs.size());
  ASSERT_TRUE(fs_->DropUnsyncedData(cc.mode, cc.seed).ok());

  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::map<std::string, std::set<std::pair<uint64_t, uint64_t>>> scanned;
  for (const std::string& job : jobs) {
    Status s = store->Scan(
        job,
        [&](const format::RecordHeader&, const ChunkLocation& l) {
          scanned[job].insert({l.segment, l.offset});
        },
        [](const Status& e) {
          EXPECT_EQ(e.code(), absl::StatusCode::kDataLoss);
        });
    EXPECT_TRUE(s.ok() || absl::IsNotFound(s)) << s;
  }
  for (size_t i = 0; i < recs.size(); ++i) {
    if (!c.result(i).ok()) continue;
    const ChunkLocation& loc = *c.result(i);
    ExpectReadsBack(store.get(), job_of[i], loc, recs[i]);
    EXPECT_EQ(scanned[job_of[i]].count({loc.segment, loc.offset}), 1u)
        << "acknowledged record " << i << " not found by Scan";
  }
  // The store writes again after the crash, in a segment of its own.
  TestRecord fresh = MakeRecord(rng, 1234);
  auto l = AppendSync(store.get(), "x", fresh);
  ASSERT_TRUE(l.ok()) << l.status();
  ExpectReadsBack(store.get(), "x", *l, fresh);
}

std::vector<CrashCase> CrashCases() {
  std::vector<CrashCase> v;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    v.push_back({seed, CrashMode::kDropAll});
    v.push_back({seed, CrashMode::kTornTail});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Seeds, SegmentStoreCrashTest,
                         ::testing::ValuesIn(CrashCases()),
                         [](const ::testing::TestParamInfo<CrashCase>& info) {
                           return absl::StrCat(
                               info.param.mode == CrashMode::kDropAll
                                   ? "DropAll"
                                   : "TornTail",
                               info.param.seed);
                         });

}  // namespace
}  // namespace stagger::server
