#include "server/storage/segment_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/storage/fault_injection_file_system.h"
#include "server/storage/internal/segment_files.h"
#include "server/storage/posix_file_system.h"
#include "server/storage/testing/test_util.h"
#include "server/storage/uring_file_system.h"

namespace stagger::server {
namespace {

using storage_internal::AppendSync;
using storage_internal::Collector;
using storage_internal::FlipByte;
using storage_internal::MakeRecord;
using storage_internal::SegmentFileName;
using storage_internal::TempDir;
using storage_internal::TestRecord;

class SegmentStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }
  SegmentStoreOptions Options() {
    SegmentStoreOptions o;
    o.dir = dir_.path();
    o.segment_bytes = 256 << 10;
    o.max_batch_bytes = 512 << 10;
    o.queue_depth = 8;
    return o;
  }
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
    EXPECT_EQ(got->header.chunk_id, r.header.chunk_id);
    EXPECT_EQ(got->header.encoded_length, r.payload.size());
    EXPECT_EQ(got->payload.view(), r.payload);
  }
  TempDir dir_;
};

TEST_F(SegmentStoreTest, RoundTripAcrossSegmentsAndJobs) {
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(1);
  const std::vector<std::string> jobs = {"job-a", "job.b", "JOB_c"};
  constexpr size_t kRecords = 300;
  std::vector<TestRecord> records;
  std::vector<std::string> job_of;
  Collector c(kRecords);
  for (size_t i = 0; i < kRecords; ++i) {
    // Sizes cross the 4 KiB padding boundary and, now and then, the 1 MiB
    // staging buffer.
    size_t size = i % 50 == 49 ? (1 << 20) + 12345 : rng() % 40000;
    records.push_back(MakeRecord(rng, size));
    job_of.push_back(jobs[rng() % jobs.size()]);
    store->Append(job_of[i], records[i].header, records[i].Payload(),
                  c.Callback(i));
  }
  c.Wait();
  std::map<std::string, std::set<uint64_t>> segments;
  std::set<std::tuple<std::string, uint64_t, uint64_t>> places;
  for (size_t i = 0; i < kRecords; ++i) {
    ASSERT_TRUE(c.result(i).ok()) << c.result(i).status();
    const ChunkLocation& loc = *c.result(i);
    EXPECT_EQ(loc.offset % 4096, 0u);
    EXPECT_EQ(loc.record_size, format::RecordSize(records[i].payload.size()));
    EXPECT_GE(loc.segment, 1u);
    EXPECT_TRUE(places.insert({job_of[i], loc.segment, loc.offset}).second);
    segments[job_of[i]].insert(loc.segment);
    ExpectReadsBack(store.get(), job_of[i], loc, records[i]);
  }
  for (const std::string& job : jobs) {
    EXPECT_GT(segments[job].size(), 3u) << job << " never rolled over";
    for (uint64_t id : segments[job]) {
      EXPECT_EQ(access(SegPath(job, id).c_str(), F_OK), 0) << SegPath(job, id);
    }
  }
}

TEST_F(SegmentStoreTest, ConcurrentAppendersAllReadBack) {
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4;
  constexpr size_t kPerThread = 100;
  std::vector<std::vector<TestRecord>> recs(kThreads);
  std::vector<std::unique_ptr<Collector>> cols;
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937_64 rng(100 + t);
    for (size_t i = 0; i < kPerThread; ++i) {
      recs[t].push_back(MakeRecord(rng, rng() % 20000));
    }
    cols.push_back(std::make_unique<Collector>(kPerThread));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Two threads share a job so their records interleave in segments.
      std::string job = "job" + std::to_string(t / 2);
      for (size_t i = 0; i < kPerThread; ++i) {
        store->Append(job, recs[t][i].header, recs[t][i].Payload(),
                      cols[t]->Callback(i));
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::tuple<int, uint64_t, uint64_t>> places;
  for (int t = 0; t < kThreads; ++t) {
    cols[t]->Wait();
    for (size_t i = 0; i < kPerThread; ++i) {
      ASSERT_TRUE(cols[t]->result(i).ok()) << cols[t]->result(i).status();
      const ChunkLocation& loc = *cols[t]->result(i);
      EXPECT_TRUE(places.insert({t / 2, loc.segment, loc.offset}).second)
          << "two records at one place";
      ExpectReadsBack(store.get(), "job" + std::to_string(t / 2), loc,
                      recs[t][i]);
    }
  }
}

TEST_F(SegmentStoreTest, FlippedByteIsDataLossNamingPlace) {
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(2);
  std::vector<TestRecord> recs;
  std::vector<ChunkLocation> locs;
  for (int i = 0; i < 3; ++i) {
    recs.push_back(MakeRecord(rng, 5000));
    auto loc = AppendSync(store.get(), "j", recs.back());
    ASSERT_TRUE(loc.ok());
    locs.push_back(*loc);
  }
  // Payload, header and padding of three different records.
  FlipByte(SegPath("j", locs[0].segment), locs[0].offset + 64 + 1234);
  FlipByte(SegPath("j", locs[1].segment), locs[1].offset + 30);
  FlipByte(SegPath("j", locs[2].segment), locs[2].offset + 64 + 5000 + 7);
  for (int i = 0; i < 3; ++i) {
    auto got = store->Read("j", locs[i]);
    ASSERT_FALSE(got.ok()) << "record " << i;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
    std::string want = absl::StrCat("job j segment ", locs[i].segment,
                                    " offset ", locs[i].offset);
    EXPECT_NE(got.status().message().find(want), std::string::npos)
        << got.status();
  }
}

TEST_F(SegmentStoreTest, ReopenWritesNewSegmentAndReadsOldOnes) {
  std::mt19937_64 rng(3);
  TestRecord a = MakeRecord(rng, 10000), b = MakeRecord(rng, 20000);
  ChunkLocation la;
  {
    auto store = OpenStore(Options());
    ASSERT_NE(store, nullptr);
    auto loc = AppendSync(store.get(), "job", a);
    ASSERT_TRUE(loc.ok());
    la = *loc;
  }
  auto old_size =
      storage_internal::ReadFileBytes(SegPath("job", la.segment)).size();
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  auto lb = AppendSync(store.get(), "job", b);
  ASSERT_TRUE(lb.ok());
  EXPECT_EQ(lb->segment, la.segment + 1);
  EXPECT_EQ(lb->offset, 0u);
  EXPECT_EQ(storage_internal::ReadFileBytes(SegPath("job", la.segment)).size(),
            old_size);
  ExpectReadsBack(store.get(), "job", la, a);
  ExpectReadsBack(store.get(), "job", *lb, b);
}

TEST_F(SegmentStoreTest, MissingSegmentIsNotFound) {
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  auto got = store->Read("job", ChunkLocation{7, 0, 4096});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Read("job", ChunkLocation{1, 100, 4096}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SegmentStoreTest, InvalidInputIsRejectedAndStoreGoesOn) {
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(4);
  TestRecord r = MakeRecord(rng, 3000);
  for (const std::string& job :
       {std::string(""), std::string("a/b"), std::string(".."),
        std::string("."), std::string(129, 'x'), std::string("a\0b", 3)}) {
    auto loc = AppendSync(store.get(), job, r);
    EXPECT_EQ(loc.status().code(), absl::StatusCode::kInvalidArgument)
        << "job of " << job.size() << " bytes";
    EXPECT_EQ(store->Read(job, ChunkLocation{1, 0, 4096}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  TestRecord bad = r;
  bad.header.payload_crc32c ^= 1;
  EXPECT_EQ(AppendSync(store.get(), "ok", bad).status().code(),
            absl::StatusCode::kDataLoss);
  bad = r;
  bad.header.encoded_length += 1;
  EXPECT_EQ(AppendSync(store.get(), "ok", bad).status().code(),
            absl::StatusCode::kDataLoss);
  auto loc = AppendSync(store.get(), "ok", r);
  ASSERT_TRUE(loc.ok()) << loc.status();
  ExpectReadsBack(store.get(), "ok", *loc, r);
  EXPECT_EQ(access(JoinPath(dir_.path(), "..").c_str(), F_OK), 0);
}

TEST_F(SegmentStoreTest, ScanFindsEveryRecordAndStopsAtTornTail) {
  SegmentStoreOptions o = Options();
  o.segment_bytes = 64 << 10;
  std::mt19937_64 rng(5);
  std::vector<ChunkLocation> locs;
  {
    auto store = OpenStore(o);
    ASSERT_NE(store, nullptr);
    Collector c(40);
    std::vector<TestRecord> recs;
    for (int i = 0; i < 40; ++i) recs.push_back(MakeRecord(rng, rng() % 12000));
    for (int i = 0; i < 40; ++i) {
      store->Append("s", recs[i].header, recs[i].Payload(), c.Callback(i));
    }
    c.Wait();
    for (int i = 0; i < 40; ++i) locs.push_back(*c.result(i));
  }
  // Tear the last record of the last segment: keep half of it.
  const ChunkLocation last = locs.back();
  ASSERT_EQ(::truncate(SegPath("s", last.segment).c_str(),
                       last.offset + last.record_size / 2),
            0);
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  std::vector<ChunkLocation> seen;
  std::vector<Status> errors;
  Status s = store->Scan(
      "s",
      [&](const format::RecordHeader& h, const ChunkLocation& loc) {
        seen.push_back(loc);
      },
      [&](const Status& e) { errors.push_back(e); });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(seen.size(), locs.size() - 1);
  for (size_t i = 0; i + 1 < locs.size(); ++i) {
    EXPECT_EQ(seen[i].segment, locs[i].segment);
    EXPECT_EQ(seen[i].offset, locs[i].offset);
    EXPECT_EQ(seen[i].record_size, locs[i].record_size);
  }
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(errors[0].message().find(absl::StrCat("segment ", last.segment,
                                                  " offset ", last.offset)),
            std::string::npos)
      << errors[0];
  EXPECT_EQ(store->Scan("nojob", nullptr, nullptr).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SegmentStoreTest, ScanStopsAtCorruptRecordOnlyInItsSegment) {
  SegmentStoreOptions o = Options();
  o.segment_bytes = 16 << 10;  // four 4 KiB records per segment
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(6);
  std::vector<ChunkLocation> locs;
  for (int i = 0; i < 8; ++i) {
    auto loc = AppendSync(store.get(), "c", MakeRecord(rng, 1000));
    ASSERT_TRUE(loc.ok());
    locs.push_back(*loc);
  }
  ASSERT_EQ(locs[0].segment, locs[3].segment);
  ASSERT_EQ(locs[4].segment, locs[0].segment + 1);
  FlipByte(SegPath("c", locs[1].segment), locs[1].offset + 100);
  std::vector<ChunkLocation> seen;
  int errors = 0;
  ASSERT_TRUE(store
                  ->Scan(
                      "c",
                      [&](const format::RecordHeader&, const ChunkLocation& l) {
                        seen.push_back(l);
                      },
                      [&](const Status& e) {
                        ++errors;
                        EXPECT_EQ(e.code(), absl::StatusCode::kDataLoss);
                      })
                  .ok());
  EXPECT_EQ(errors, 1);
  // Record 0, then the second segment whole.
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0].offset, locs[0].offset);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(seen[1 + i].offset, locs[4 + i].offset);
}

TEST_F(SegmentStoreTest, DestructorRunsEveryQueuedCallback) {
  std::mt19937_64 rng(7);
  std::vector<TestRecord> recs;
  for (int i = 0; i < 64; ++i) recs.push_back(MakeRecord(rng, 8000));
  Collector c(recs.size());
  {
    auto store = OpenStore(Options());
    ASSERT_NE(store, nullptr);
    for (size_t i = 0; i < recs.size(); ++i) {
      store->Append("d", recs[i].header, recs[i].Payload(), c.Callback(i));
    }
  }
  c.Wait();  // returns at once: the destructor ran them all
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_TRUE(c.result(i).ok()) << c.result(i).status();
  }
  auto store = OpenStore(Options());
  for (size_t i = 0; i < recs.size(); ++i) {
    ExpectReadsBack(store.get(), "d", *c.result(i), recs[i]);
  }
}

TEST_F(SegmentStoreTest, DirectIOFlagOnDisk) {
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(8);
  ASSERT_TRUE(AppendSync(store.get(), "j", MakeRecord(rng, 100)).ok());
  std::string probe = JoinPath(dir_.path(), "probe");
  int fd = ::open(probe.c_str(), O_CREAT | O_RDWR | O_DIRECT, 0644);
  EXPECT_EQ(store->direct_io(), fd >= 0);
  if (fd >= 0) ::close(fd);
}

TEST_F(SegmentStoreTest, DirectIOFallbackOnTmpfs) {
  if (access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  TempDir shm("/dev/shm");
  ASSERT_TRUE(shm.ok());
  std::string probe = JoinPath(shm.path(), "probe");
  int fd = ::open(probe.c_str(), O_CREAT | O_RDWR | O_DIRECT, 0644);
  if (fd >= 0) {
    ::close(fd);
    GTEST_SKIP() << "tmpfs accepts O_DIRECT on this kernel (Linux >= 6.6)";
  }
  SegmentStoreOptions o = Options();
  o.dir = shm.path();
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  std::mt19937_64 rng(9);
  TestRecord r = MakeRecord(rng, 7000);
  auto loc = AppendSync(store.get(), "j", r);
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_FALSE(store->direct_io());
  ExpectReadsBack(store.get(), "j", *loc, r);
}

TEST_F(SegmentStoreTest, DirectIOFallbackWhenFileSystemRefuses) {
  PosixFileSystem base;
  FaultInjectionFileSystem fs(&base);
  fs.SetRejectDirectIO(true);
  SegmentStoreOptions o = Options();
  o.fs = &fs;
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->direct_io());  // nothing refused it yet
  std::mt19937_64 rng(10);
  TestRecord r = MakeRecord(rng, 7000);
  auto loc = AppendSync(store.get(), "j", r);
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_FALSE(store->direct_io());
  ExpectReadsBack(store.get(), "j", *loc, r);
}

TEST_F(SegmentStoreTest, WritesFromRegisteredStagingBuffers) {
  auto fs = UringFileSystem::Create(UringFileSystemOptions{4});
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  SegmentStoreOptions o = Options();
  o.fs = fs->get();
  o.queue_depth = 2;
  o.max_batch_bytes = 2 << 20;  // 2 staging buffers: 2 MiB, under 8 MiB memlock
  std::mt19937_64 rng(11);
  std::vector<TestRecord> recs;
  std::vector<ChunkLocation> locs;
  {
    auto store = OpenStore(o);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 5; ++i) {
      recs.push_back(MakeRecord(rng, 300000));
      auto loc = AppendSync(store.get(), "r", recs.back());
      ASSERT_TRUE(loc.ok()) << loc.status();
      locs.push_back(*loc);
    }
    UringFileSystem::Stats st = (*fs)->stats();
    EXPECT_EQ(st.fixed_requests, 5u);
    EXPECT_EQ(st.plain_requests, 0u);
    EXPECT_EQ(st.syncs, 5u);
    for (int i = 0; i < 5; ++i) {
      ExpectReadsBack(store.get(), "r", locs[i], recs[i]);
    }
  }
}

TEST_F(SegmentStoreTest, WritesRecordsInPlaceFromBuffersWithHeadroom) {
  // Payloads received with room for the record header (as the server's
  // transport delivers them) are written without a copy; mixed with
  // ordinary buffers, every record reads back intact.
  std::mt19937_64 rng(21);
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  std::vector<TestRecord> recs;
  for (int i = 0; i < 24; ++i) recs.push_back(MakeRecord(rng, rng() % 90000));
  Collector c(recs.size());
  for (size_t i = 0; i < recs.size(); ++i) {
    transport::Buffer b;
    if (i % 3 != 2) {
      b = transport::Buffer::WithHeadroom(recs[i].payload.size(),
                                          format::kRecordHeaderSize);
      std::memcpy(b.data(), recs[i].payload.data(), recs[i].payload.size());
      // Garbage where the header and padding go: the store overwrites it.
      std::memset(b.data() - format::kRecordHeaderSize, 0x5a,
                  format::kRecordHeaderSize);
      std::memset(b.data() + b.size(), 0x5a, b.capacity() - b.size());
    } else {
      b = recs[i].Payload();
    }
    store->Append("h", recs[i].header, std::move(b), c.Callback(i));
  }
  c.Wait();
  for (size_t i = 0; i < recs.size(); ++i) {
    ASSERT_TRUE(c.result(i).ok()) << c.result(i).status();
    ExpectReadsBack(store.get(), "h", *c.result(i), recs[i]);
  }
}

TEST_F(SegmentStoreTest, ReservedSpaceIsCutOffAndScanEndsCleanlyAtZeros) {
  SegmentStoreOptions o = Options();
  o.segment_bytes = 1 << 20;
  o.preallocate_bytes = 256 << 10;
  std::mt19937_64 rng(8);
  std::vector<ChunkLocation> locs;
  uint64_t bytes = 0;
  {
    auto store = OpenStore(o);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 5; ++i) {
      auto loc = AppendSync(store.get(), "p", MakeRecord(rng, 20000));
      ASSERT_TRUE(loc.ok()) << loc.status();
      locs.push_back(*loc);
      bytes += loc->record_size;
    }
    // While open, the segment holds the reservation, not just the records:
    // an eighth of what it holds, at least 64 KiB: the first record
    // reserves up to 84 KiB, the fifth (at 100 KiB) up to 164 KiB.
    EXPECT_EQ(bytes, 100u << 10);
    EXPECT_EQ(std::filesystem::file_size(SegPath("p", 1)), 164u << 10);
    // What the listing says the records take at least: never more than
    // they do, and less by at most the reservation's bound.
    auto listed = store->ListSegments("p");
    ASSERT_TRUE(listed.ok()) << listed.status();
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_FALSE((*listed)[0].sealed);
    EXPECT_LE((*listed)[0].records_at_least, bytes);
    EXPECT_GE((*listed)[0].records_at_least, bytes - (68u << 10));
  }
  // Closed: cut back to the records.
  EXPECT_EQ(std::filesystem::file_size(SegPath("p", 1)), bytes);
  // A crash leaves the reservation (zeros) behind the last record: Scan
  // stops there without reporting corruption.
  ASSERT_EQ(::truncate(SegPath("p", 1).c_str(), 512 << 10), 0);
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  std::vector<ChunkLocation> seen;
  std::vector<Status> errors;
  ASSERT_TRUE(store
                  ->Scan(
                      "p",
                      [&](const format::RecordHeader&,
                          const ChunkLocation& loc) { seen.push_back(loc); },
                      [&](const Status& e) { errors.push_back(e); })
                  .ok());
  EXPECT_EQ(seen.size(), locs.size());
  EXPECT_TRUE(errors.empty()) << errors[0];
}

TEST_F(SegmentStoreTest, FullDiskRefusingReservationStillWritesWhatFits) {
  // The disk cannot hold the reservation but can hold the record: the
  // store writes it anyway (an extending write), and says
  // RESOURCE_EXHAUSTED only when the bytes themselves do not fit.
  auto base = NewDefaultFileSystem(8);
  ASSERT_TRUE(base.ok());
  FaultInjectionFileSystem fs(base->get());
  SegmentStoreOptions o = Options();
  o.fs = &fs;
  o.preallocate_bytes = 1 << 20;
  fs.SetNoSpaceAfter(64 << 10);
  std::mt19937_64 rng(9);
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  TestRecord fits = MakeRecord(rng, 30000);
  auto loc = AppendSync(store.get(), "f", fits);
  ASSERT_TRUE(loc.ok()) << loc.status();
  ExpectReadsBack(store.get(), "f", *loc, fits);
  auto full = AppendSync(store.get(), "f", MakeRecord(rng, 60000));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted)
      << full.status();
  ExpectReadsBack(store.get(), "f", *loc, fits);
}

TEST_F(SegmentStoreTest, OpenRejectsBadOptions) {
  SegmentStoreOptions o = Options();
  o.dir = "";
  EXPECT_EQ(SegmentStore::Open(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Options();
  o.queue_depth = 0;
  EXPECT_EQ(SegmentStore::Open(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SegmentStoreTest, OnlySealedSegmentsAreListedOrRemoved) {
  auto store = OpenStore(Options());  // 256 KiB segments
  std::mt19937_64 rng(5);
  std::vector<TestRecord> recs;
  std::vector<ChunkLocation> locs;
  // Two 104 KiB records per segment: segments 1 and 2 full, 3 open.
  for (int i = 0; i < 5; ++i) {
    recs.push_back(MakeRecord(rng, 100 << 10));
    auto loc = AppendSync(store.get(), "j", recs.back());
    ASSERT_TRUE(loc.ok()) << loc.status();
    locs.push_back(*loc);
  }
  ASSERT_EQ(locs[4].segment, 3u);
  auto sealed = store->ListSealedSegments("j");
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  ASSERT_EQ(sealed->size(), 2u);
  EXPECT_EQ((*sealed)[0].id, 1u);
  EXPECT_EQ((*sealed)[1].id, 2u);
  EXPECT_EQ((*sealed)[0].size, 2 * format::RecordSize(100 << 10));

  Status open = store->RemoveSegment("j", 3);
  EXPECT_EQ(open.code(), absl::StatusCode::kFailedPrecondition) << open;
  EXPECT_NE(open.message().find("not sealed"), std::string::npos);
  ExpectReadsBack(store.get(), "j", locs[4], recs[4]);

  ASSERT_TRUE(store->RemoveSegment("j", 1).ok());
  EXPECT_FALSE(std::filesystem::exists(SegPath("j", 1)));
  EXPECT_EQ(store->Read("j", locs[0]).status().code(),
            absl::StatusCode::kNotFound);
  ExpectReadsBack(store.get(), "j", locs[2], recs[2]);
  EXPECT_EQ(store->RemoveSegment("j", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->RemoveSegment("..", 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->ListSealedSegments("a/b").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto none = store->ListSealedSegments("none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  // A new store never appends to earlier segments: all of them are sealed.
  store.reset();
  store = OpenStore(Options());
  sealed = store->ListSealedSegments("j");
  ASSERT_TRUE(sealed.ok());
  ASSERT_EQ(sealed->size(), 2u);
  EXPECT_EQ((*sealed)[0].id, 2u);
  EXPECT_EQ((*sealed)[1].id, 3u);
  ASSERT_TRUE(AppendSync(store.get(), "j", recs[0]).ok());  // opens 4
  sealed = store->ListSealedSegments("j");
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->size(), 2u);
  EXPECT_EQ(store->RemoveSegment("j", 4).code(),
            absl::StatusCode::kFailedPrecondition);
}

class SegmentLifetimeTest : public SegmentStoreTest {
 protected:
  // 1 MiB long-lived segments, 256 KiB short-lived ones.
  SegmentStoreOptions Options() {
    SegmentStoreOptions o = SegmentStoreTest::Options();
    o.segment_bytes = 1 << 20;
    o.short_lived_segment_bytes = 256 << 10;
    return o;
  }
};

// Records of each lifetime go to segments of their own, short-lived ones
// rolled at their own size, so a segment of them is sealed (listed,
// removable) while the long-lived segment of the same job stays open.
TEST_F(SegmentLifetimeTest, EachLifetimeFillsSegmentsOfItsOwn) {
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  SegmentStore* s = store.get();
  std::mt19937_64 rng(9);
  TestRecord r = MakeRecord(rng, 100 << 10);  // 104 KiB on disk

  auto long1 = AppendSync(s, "j", r, RecordLifetime::kLong);
  std::vector<ChunkLocation> saved;
  for (int i = 0; i < 3; ++i) {  // two per 256 KiB segment
    auto loc = AppendSync(s, "j", r, RecordLifetime::kSaved);
    ASSERT_TRUE(loc.ok()) << loc.status();
    saved.push_back(*loc);
  }
  auto rebased = AppendSync(s, "j", r, RecordLifetime::kRebased);
  auto long2 = AppendSync(s, "j", r, RecordLifetime::kLong);
  ASSERT_TRUE(long1.ok() && rebased.ok() && long2.ok());

  EXPECT_EQ(long1->segment, long2->segment);
  EXPECT_EQ(saved[0].segment, saved[1].segment);
  EXPECT_NE(saved[1].segment, saved[2].segment);
  EXPECT_NE(saved[0].segment, long1->segment);
  EXPECT_NE(rebased->segment, long1->segment);
  EXPECT_NE(rebased->segment, saved[2].segment);

  auto sealed = s->ListSealedSegments("j");
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  ASSERT_EQ(sealed->size(), 1u);
  EXPECT_EQ((*sealed)[0].id, saved[0].segment);
  EXPECT_EQ(s->RemoveSegment("j", long1->segment).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->RemoveSegment("j", saved[0].segment).ok());

  auto all = s->ListSegments("j");
  ASSERT_TRUE(all.ok()) << all.status();
  std::map<uint64_t, RecordLifetime> open;
  for (const SegmentInfo& i : *all) {
    if (!i.sealed) open[i.id] = i.lifetime;
  }
  EXPECT_EQ(open, (std::map<uint64_t, RecordLifetime>{
                      {long1->segment, RecordLifetime::kLong},
                      {saved[2].segment, RecordLifetime::kSaved},
                      {rebased->segment, RecordLifetime::kRebased}}));

  // Rolling one lifetime seals that segment alone.
  ASSERT_TRUE(s->Roll("j", RecordLifetime::kRebased).ok());
  sealed = s->ListSealedSegments("j");
  ASSERT_TRUE(sealed.ok());
  ASSERT_EQ(sealed->size(), 1u);
  EXPECT_EQ((*sealed)[0].id, rebased->segment);
  auto next = AppendSync(s, "j", r, RecordLifetime::kRebased);
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->segment, rebased->segment);
}

// RequestRoll returns at once; the segment is retired before the next batch
// if it holds min_bytes by then, and left open otherwise.
TEST_F(SegmentLifetimeTest, RequestedRollsHonourTheirMinimum) {
  auto store = OpenStore(Options());
  ASSERT_NE(store, nullptr);
  SegmentStore* s = store.get();
  std::mt19937_64 rng(10);
  TestRecord r = MakeRecord(rng, 60 << 10);  // 64 KiB on disk

  auto first = AppendSync(s, "j", r, RecordLifetime::kSaved);
  ASSERT_TRUE(first.ok());
  s->RequestRoll("j", RecordLifetime::kSaved, 128 << 10);  // too small
  auto second = AppendSync(s, "j", r, RecordLifetime::kSaved);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->segment, first->segment);
  s->RequestRoll("j", RecordLifetime::kSaved, 128 << 10);  // now 128 KiB
  auto third = AppendSync(s, "j", r, RecordLifetime::kSaved);
  ASSERT_TRUE(third.ok());
  EXPECT_GT(third->segment, first->segment);
  s->RequestRoll("no/such", RecordLifetime::kSaved, 0);  // ignored
}

// A store knows the lifetime of the segments it opened; one of an earlier
// run counts as short-lived when it is no larger than a short-lived
// segment may grow.
TEST_F(SegmentLifetimeTest, ShortLivedIsKnownAndAfterARestartJudgedBySize) {
  SegmentStoreOptions o = Options();
  o.preallocate_bytes = 0;
  std::mt19937_64 rng(11);
  TestRecord r = MakeRecord(rng, 100 << 10);  // 104 KiB on disk
  ChunkLocation big, small, saved;
  {
    auto store = OpenStore(o);
    ASSERT_NE(store, nullptr);
    SegmentStore* s = store.get();
    for (int i = 0; i < 3; ++i) {  // 312 KiB: larger than a short segment
      auto loc = AppendSync(s, "j", r, RecordLifetime::kLong);
      ASSERT_TRUE(loc.ok());
      big = *loc;
    }
    auto loc = AppendSync(s, "j", r, RecordLifetime::kSaved);
    ASSERT_TRUE(loc.ok());
    saved = *loc;
    EXPECT_TRUE(s->ShortLived("j", saved.segment));
    EXPECT_FALSE(s->ShortLived("j", big.segment));
    ASSERT_TRUE(s->Roll("j").ok());
    loc = AppendSync(s, "j", r, RecordLifetime::kLong);  // 104 KiB, long
    ASSERT_TRUE(loc.ok());
    small = *loc;
    EXPECT_FALSE(s->ShortLived("j", small.segment));
    EXPECT_FALSE(s->ShortLived("j", 999));
  }
  auto store = OpenStore(o);
  ASSERT_NE(store, nullptr);
  SegmentStore* s = store.get();
  EXPECT_TRUE(s->ShortLived("j", saved.segment));
  EXPECT_FALSE(s->ShortLived("j", big.segment));
  EXPECT_TRUE(s->ShortLived("j", small.segment));  // taken for one: a copy
  EXPECT_FALSE(s->ShortLived("j", 999));
  EXPECT_FALSE(s->ShortLived("../x", 1));
}

TEST_F(SegmentLifetimeTest, ZeroShortSegmentSizeIsRefused) {
  SegmentStoreOptions o = Options();
  o.short_lived_segment_bytes = 0;
  auto store = SegmentStore::Open(o);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(store.status().message().find("short_lived_segment_bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace stagger::server
