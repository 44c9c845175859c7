// Asynchronous save through the SDK against an embedded server: the snapshot
// is what gets saved, whatever the training loop does afterwards.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "stagger/checkpointer.h"
#include "tests/testutil/pattern.h"
#include "tests/testutil/process.h"

namespace stagger {
namespace {

using testutil::FillPattern;

class AsyncSaveTest : public ::testing::Test {
 public:
  std::unique_ptr<Checkpointer> Open(CheckpointerOptions o = {}) {
    o.servers = "embedded:" + dir_.path();
    o.job = "async";
    auto ck = Checkpointer::Open(o);
    EXPECT_TRUE(ck.ok()) << ck.status();
    return ck.ok() ? std::move(*ck) : nullptr;
  }

  // Loads `step` of tensor "t" (`n` bytes) into fresh memory.
  std::vector<char> LoadBack(Checkpointer& ck, int64_t step, size_t n) {
    std::vector<char> out(n, 0);
    ck.ClearRegistrations();
    EXPECT_TRUE(ck.Register({"t", "U8", {int64_t(n)}, out.data()}).ok());
    auto loaded = ck.Load(step);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return out;
  }

 protected:
  testutil::TempDir dir_;
};

TEST_F(AsyncSaveTest, ModifyingRightAfterSaveReturnsDoesNotLeakIn) {
  auto ck = Open();
  std::vector<char> t(5 << 20);
  FillPattern(t, 1);
  const std::vector<char> before = t;
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok()) << h.status();
  std::memset(t.data(), 0x5a, t.size());  // the next optimizer step
  ASSERT_TRUE(h->Wait().ok());
  SaveStats s = h->stats();
  EXPECT_EQ(s.bytes_raw, t.size());
  EXPECT_EQ(s.chunks, 2u);
  EXPECT_GT(s.stall_s, 0);
  EXPECT_LE(s.snapshot_s, s.durable_s);
  EXPECT_EQ(LoadBack(*ck, 1, t.size()), before);
}

TEST_F(AsyncSaveTest, LazyModeCapturesBeforeBeforeUpdateReturns) {
  auto ck = Open();
  std::vector<char> t(9 << 20);
  FillPattern(t, 2);
  const std::vector<char> before = t;
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto h = ck->Save(2, SaveOptions{/*lazy=*/true});
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(ck->BeforeUpdate().ok());
  std::memset(t.data(), 0x33, t.size());
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_EQ(LoadBack(*ck, 2, t.size()), before);
  // With no save in progress BeforeUpdate returns at once.
  EXPECT_TRUE(ck->BeforeUpdate().ok());
}

TEST_F(AsyncSaveTest, StateFourTimesThePoolSavesWithinThePool) {
  CheckpointerOptions o;
  o.chunk_size = 256 << 10;
  o.staging_bytes = 1 << 20;  // 4 slabs
  o.snapshot_overlap =
      SnapshotOverlap::kOff;  // the dry pool alone starts the drain
  auto ck = Open(o);
  std::vector<char> t(4 << 20);  // 4x the pool
  FillPattern(t, 3);
  const std::vector<char> before = t;
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto h = ck->Save(3);
  ASSERT_TRUE(h.ok());
  std::memset(t.data(), 0, t.size());
  ASSERT_TRUE(h->Wait().ok());
  SaveStats s = h->stats();
  EXPECT_TRUE(s.staging_limited);
  EXPECT_LE(s.staging_bytes, o.staging_bytes);
  EXPECT_GT(s.staging_bytes, 0u);
  EXPECT_EQ(s.chunks, 16u);
  // At least the last 12 chunks were copied only as earlier ones drained.
  EXPECT_GE(s.bytes_overlapped, 12u * o.chunk_size);
  EXPECT_LT(s.bytes_overlapped, s.bytes_raw);
  EXPECT_EQ(LoadBack(*ck, 3, t.size()), before);
}

// The encoders work at most 2 x max_inflight_chunks ahead of the
// acknowledgements. With zstd each chunk is encoded into a buffer of its
// own and its slab goes back to the pool, so nothing else would bound how
// many encoded chunks wait for the wire.
TEST_F(AsyncSaveTest, EncodersStayWithinTheShipWindow) {
  CheckpointerOptions o;
  o.chunk_size = 256 << 10;
  o.max_inflight_chunks = 2;
  o.codec = CodecChoice::kZstd;
  auto ck = Open(o);
  std::vector<char> t(16 << 20);  // 64 chunks
  FillPattern(t, 7);
  const std::vector<char> before = t;
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto h = ck->Save(7);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->Wait().ok());
  SaveStats s = h->stats();
  EXPECT_EQ(s.chunks, 64u);
  EXPECT_GE(s.peak_chunks_shipping, 1u);
  EXPECT_LE(s.peak_chunks_shipping, 2 * o.max_inflight_chunks);
  EXPECT_EQ(LoadBack(*ck, 7, t.size()), before);
}

// Saves 32 MiB in 1 MiB chunks (the pool holds them all) with
// `snapshot_overlap`, overwrites the tensor as soon as Save() returns, and
// checks that the state at Save() is what loads back. Returns the stats.
SaveStats SaveThenOverwrite(AsyncSaveTest* test, const std::string& overlap,
                            int64_t step) {
  CheckpointerOptions o;
  o.chunk_size = 1 << 20;
  o.snapshot_overlap = *ParseSnapshotOverlap(overlap);
  auto ck = test->Open(o);
  if (ck == nullptr) return {};
  std::vector<char> t(32 << 20);
  FillPattern(t, static_cast<uint32_t>(step));
  const std::vector<char> before = t;
  EXPECT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto h = ck->Save(step);
  EXPECT_TRUE(h.ok()) << h.status();
  if (!h.ok()) return {};
  std::memset(t.data(), 0x5a, t.size());
  EXPECT_TRUE(h->Wait().ok());
  EXPECT_EQ(test->LoadBack(*ck, step, t.size()), before);
  SaveStats s = h->stats();
  EXPECT_FALSE(s.staging_limited);
  EXPECT_EQ(s.bytes_raw, t.size());
  return s;
}

TEST_F(AsyncSaveTest, WithOverlapOffNothingShipsBeforeTheSnapshotIsTaken) {
  EXPECT_EQ(SaveThenOverwrite(this, "off", 4).bytes_overlapped, 0u);
}

// Chunks ship as they are captured, and what is restored is still the state
// at Save(), also when the tensor changes while later chunks still ship.
TEST_F(AsyncSaveTest, WithOverlapOnChunksShipWhileTheSnapshotIsTaken) {
  SaveStats s = SaveThenOverwrite(this, "on", 5);
  // The last chunk captured ends the snapshot; every chunk before it may
  // already have been handed to the encoders.
  EXPECT_GT(s.bytes_overlapped, 0u);
  EXPECT_LT(s.bytes_overlapped, s.bytes_raw);
}

// The default pool holds the whole state even when every tensor ends in a
// partial chunk (a piece each, the power of two from 4 KiB that holds
// it): the snapshot never waits for the drain.
TEST_F(AsyncSaveTest, DefaultPoolHoldsEveryTensorsLastPartialChunk) {
  CheckpointerOptions o;
  o.chunk_size = 256 << 10;
  auto ck = Open(o);
  std::vector<std::vector<char>> ts;
  for (int i = 0; i < 5; ++i) ts.emplace_back((1 << 20) + 4096 * (i + 1));
  for (int i = 0; i < 5; ++i) {
    FillPattern(ts[i], 10 + i);
    ASSERT_TRUE(ck->Register({"t" + std::to_string(i),
                              "U8",
                              {int64_t(ts[i].size())},
                              ts[i].data()})
                    .ok());
  }
  auto h = ck->Save(4);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->Wait().ok());
  SaveStats s = h->stats();
  EXPECT_EQ(s.chunks, 25u);  // 5 x (4 whole + 1 partial)
  EXPECT_FALSE(s.staging_limited);
  // 20 whole slabs, and pieces for tails of 4, 8, 12, 16 and 20 KiB.
  EXPECT_EQ(s.staging_bytes,
            20u * o.chunk_size + ((4 + 8 + 16 + 16 + 32) << 10));
}

// Hundreds of small tensors (biases, norms) take pieces, not a 4 MiB slab
// each: the default pool stays near the state's size and the snapshot does
// not wait for the drain.
TEST_F(AsyncSaveTest, HundredsOfSmallTensorsStageInPieces) {
  auto ck = Open();
  std::vector<std::vector<char>> ts;
  uint64_t pieces = 0;  // 3000..5093 bytes: 4 KiB or 8 KiB pieces
  for (int i = 0; i < 300; ++i) {
    ts.emplace_back(3000 + 7 * i);
    pieces += ts.back().size() <= 4096 ? 4096 : 8192;
  }
  for (int i = 0; i < 300; ++i) {
    FillPattern(ts[i], 40 + i);
    ASSERT_TRUE(ck->Register({"b" + std::to_string(i),
                              "U8",
                              {int64_t(ts[i].size())},
                              ts[i].data()})
                    .ok());
  }
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->Wait().ok());
  SaveStats s = h->stats();
  EXPECT_EQ(s.chunks, 300u);
  EXPECT_FALSE(s.staging_limited);
  // The pieces, plus the slabs they are cut from (one per size): far
  // below 300 slabs of 4 MiB.
  EXPECT_EQ(s.staging_bytes, pieces);
  EXPECT_LE(s.staging_pool_bytes, pieces + 2 * (4u << 20));
  for (int i : {0, 137, 299}) {
    std::vector<char> out(ts[i].size());
    ck->ClearRegistrations();
    ASSERT_TRUE(ck->Register({"b" + std::to_string(i),
                              "U8",
                              {int64_t(out.size())},
                              out.data()})
                    .ok());
    ASSERT_EQ(ck->Load(1).value_or(-1), 1);
    EXPECT_EQ(out, ts[i]) << i;
  }
}

TEST_F(AsyncSaveTest, BusyCheckpointerFailsFastWhenAsked) {
  CheckpointerOptions o;
  o.fail_when_busy = true;
  o.chunk_size = 64 << 10;
  o.staging_bytes = 64 << 10;  // one slab: the first save drains slowly
  auto ck = Open(o);
  std::vector<char> t(32 << 20);
  FillPattern(t, 4);
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto first = ck->Save(1, SaveOptions{/*lazy=*/true});
  ASSERT_TRUE(first.ok());
  auto second = ck->Save(2);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("already in flight"),
            std::string::npos);
  ASSERT_TRUE(first->Wait().ok());
  ck->WaitAll();
  auto third = ck->Save(3);  // room again
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(third->Wait().ok());
}

TEST_F(AsyncSaveTest, TimedWaitsReturnWhileAPacedSaveRuns) {
  CheckpointerOptions o;
  o.qos_deadline_s = 2;  // 8 MiB paced over about two seconds
  auto ck = Open(o);
  std::vector<char> t(8 << 20);
  FillPattern(t, 7);
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok()) << h.status();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(h->Wait(absl::Milliseconds(50)).has_value());
  EXPECT_FALSE(ck->WaitAll(absl::Milliseconds(50)));
  EXPECT_FALSE(ck->WaitForRoom(absl::Milliseconds(50)));  // one at a time
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_FALSE(h->Done());
  std::optional<Status> outcome = h->Wait(absl::Seconds(60));
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(outcome->ok()) << *outcome;
  EXPECT_TRUE(ck->WaitAll(absl::ZeroDuration()));
  EXPECT_TRUE(ck->WaitForRoom(absl::ZeroDuration()));
  EXPECT_EQ(h->Wait(absl::ZeroDuration()).value_or(absl::UnknownError("")),
            absl::OkStatus());
}

TEST_F(AsyncSaveTest, ACancelledLoadFetchesNothingAndLeavesTheCheckpointer) {
  auto ck = Open();
  std::vector<char> t(6 << 20);
  FillPattern(t, 8);
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  ASSERT_TRUE(ck->Save(1).value().Wait().ok());
  // The timed BeforeUpdate answers once the snapshot is done.
  std::optional<Status> snapshot = ck->BeforeUpdate(absl::Seconds(60));
  ASSERT_TRUE(snapshot.has_value());
  EXPECT_TRUE(snapshot->ok()) << *snapshot;

  std::vector<char> out(t.size(), 0);
  ck->ClearRegistrations();
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, out.data()}).ok());
  const std::atomic<bool> cancelled{true};
  Result<int64_t> r = ck->Load(1, cancelled);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("cancelled after 0 of 2 chunks"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(out, std::vector<char>(t.size(), 0));
  EXPECT_EQ(ck->Metrics().loads_failed, 1u);
  // The same Checkpointer loads normally afterwards.
  EXPECT_EQ(ck->Load(1).value_or(-1), 1);
  EXPECT_EQ(out, t);
}

TEST_F(AsyncSaveTest, TheDefaultPoolGrowsAfterATinyFirstSave) {
  auto ck = Open();
  std::vector<char> tiny(8, 1);
  ASSERT_TRUE(ck->Register({"step", "U8", {8}, tiny.data()}).ok());
  auto h1 = ck->Save(1);
  ASSERT_TRUE(h1.ok()) << h1.status();
  ASSERT_TRUE(h1->Wait().ok());
  EXPECT_EQ(h1->stats().staging_pool_bytes, 4u << 20);  // one slab
  // The real state comes next: 16 MiB, four chunks.
  std::vector<char> t(16 << 20);
  FillPattern(t, 9);
  ck->ClearRegistrations();
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  auto h2 = ck->Save(2);
  ASSERT_TRUE(h2.ok()) << h2.status();
  ASSERT_TRUE(h2->Wait().ok());
  const SaveStats s = h2->stats();
  EXPECT_GE(s.staging_pool_bytes, t.size());
  EXPECT_FALSE(s.staging_limited);
  EXPECT_EQ(LoadBack(*ck, 2, t.size()), t);
  // A smaller save later keeps the larger pool.
  ck->ClearRegistrations();
  ASSERT_TRUE(ck->Register({"step", "U8", {8}, tiny.data()}).ok());
  auto h3 = ck->Save(3);
  ASSERT_TRUE(h3.ok() && h3->Wait().ok());
  EXPECT_EQ(h3->stats().staging_pool_bytes, s.staging_pool_bytes);
}

// With PrepareStaging() at set-up, the first save's stall pays neither the
// pool's mapping nor its page faults: counted as the minor page faults of
// the thread that calls Save() (the copies into prefaulted memory fault
// nothing either). Without it, the pool is made and faulted in there.
// Resident memory of this process (/proc/self/statm).
long ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Where the first save's staging memory is faulted in: inside the save
// when it comes right after Register(); before it with PrepareStaging(),
// or on the Checkpointer's own thread shortly after Register(). Measured
// as the memory that became resident during Save() (the pages of a new
// pool are faulted by the copy threads, not the calling one). The three
// Checkpointers stay open so that none takes another's parked pool.
TEST_F(AsyncSaveTest, TheFirstSaveFaultsNoStagingWhenItWasPrepared) {
  constexpr size_t kBytes = 64 << 20;
  std::vector<char> t(kBytes);
  FillPattern(t, 11);
  CheckpointerOptions o;
  // Encoders would allocate during the snapshot otherwise.
  o.snapshot_overlap = SnapshotOverlap::kOff;
  std::vector<std::unique_ptr<Checkpointer>> open;
  auto first_save_growth = [&](int64_t step, int how) -> long {
    open.push_back(Open(o));
    Checkpointer* ck = open.back().get();
    EXPECT_NE(ck, nullptr);
    if (ck == nullptr) return -1;
    EXPECT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
    if (how == 1) {
      EXPECT_TRUE(ck->PrepareStaging().ok());
      EXPECT_TRUE(ck->PrepareStaging().ok());  // already sized: nothing
    } else if (how == 2) {
      // Made in the background after the registrations went quiet.
      for (int i = 0;
           i < 3000 && ck->Metrics().staging_prefaulted_bytes < kBytes; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      EXPECT_GE(ck->Metrics().staging_prefaulted_bytes, kBytes);
    } else {
      EXPECT_EQ(ck->Metrics().staging_pool_bytes, 0u);
    }
    const long before = ResidentBytes();
    auto h = ck->Save(step);
    const long grew = ResidentBytes() - before;
    EXPECT_TRUE(h.ok()) << h.status();
    if (!h.ok()) return -1;
    EXPECT_TRUE(h->Wait().ok());
    EXPECT_GE(h->stats().staging_pool_bytes, kBytes);
    EXPECT_FALSE(h->stats().staging_limited);
    EXPECT_EQ(LoadBack(*ck, step, t.size()), t);
    return grew;
  };
  const long at_once = first_save_growth(1, 0);
  const long prepared = first_save_growth(2, 1);
  const long background = first_save_growth(3, 2);
  printf(
      "first save of 64 MiB: %ld MiB became resident during Save() right "
      "after Register(), %ld after PrepareStaging(), %ld after the "
      "background preparation\n",
      at_once >> 20, prepared >> 20, background >> 20);
  EXPECT_GE(at_once, static_cast<long>(kBytes) * 3 / 4);
  EXPECT_LT(prepared, static_cast<long>(kBytes) / 4);
  EXPECT_LT(background, static_cast<long>(kBytes) / 4);
}

// A Checkpointer made after another one of the process is gone (a
// reconnect, a new job) takes the pool the first one mapped and faulted
// in: its first save pays no page faults for staging.
TEST_F(AsyncSaveTest, ASecondCheckpointerReusesTheFirstOnesStagingPool) {
  constexpr size_t kBytes = 32 << 20;
  std::vector<char> t(kBytes);
  FillPattern(t, 13);
  {
    auto ck = Open();
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
    auto h = ck->Save(1);
    ASSERT_TRUE(h.ok() && h->Wait().ok());
  }
  auto ck = Open();
  ASSERT_NE(ck, nullptr);
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  const long before = ResidentBytes();
  auto h = ck->Save(2);
  const long grew = ResidentBytes() - before;
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_GE(h->stats().staging_pool_bytes, kBytes);
  EXPECT_FALSE(h->stats().staging_limited);
  EXPECT_LT(grew, static_cast<long>(kBytes) / 4);
  EXPECT_EQ(LoadBack(*ck, 2, t.size()), t);
}

TEST_F(AsyncSaveTest, SecondSaveWaitsForTheFirstByDefault) {
  auto ck = Open();
  std::vector<char> t(3 << 20);
  ASSERT_TRUE(ck->Register({"t", "U8", {int64_t(t.size())}, t.data()}).ok());
  std::vector<SaveHandle> handles;
  for (int step = 1; step <= 4; ++step) {
    FillPattern(t, 100 + step);
    auto h = ck->Save(step);
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  for (auto& h : handles) EXPECT_TRUE(h.Wait().ok());
  auto steps = ck->Steps(false);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 4u);
  std::vector<char> expect(t.size());
  FillPattern(expect, 102);
  EXPECT_EQ(LoadBack(*ck, 2, t.size()), expect);
}

TEST_F(AsyncSaveTest, BadOptionsAreRejected) {
  CheckpointerOptions o;
  o.servers = "embedded:" + dir_.path();
  o.job = "x";
  o.chunk_size = 5000;
  EXPECT_EQ(Checkpointer::Open(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.chunk_size = 1 << 20;
  o.max_outstanding_saves = 0;
  EXPECT_EQ(Checkpointer::Open(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.max_outstanding_saves = 1;
  Status bad = ParseSnapshotOverlap("sometimes").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("snapshot_overlap 'sometimes'"),
            std::string::npos)
      << bad;
  o.snapshot_overlap = static_cast<SnapshotOverlap>(5);
  bad = Checkpointer::Open(o).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("snapshot_overlap"), std::string::npos) << bad;
}

}  // namespace
}  // namespace stagger
