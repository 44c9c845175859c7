// QoS through the SDK against an embedded server: a deadline spreads a save,
// a marked collective holds it back, and the save still lands intact.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "qos/clock.h"
#include "qos/cpu_share.h"
#include "stagger/checkpointer.h"
#include "tests/testutil/pattern.h"
#include "tests/testutil/process.h"

namespace stagger {
namespace {

constexpr size_t kBytes = 16 << 20;

class QosSaveTest : public ::testing::Test {
 protected:
  std::unique_ptr<Checkpointer> Open(CheckpointerOptions o) {
    o.servers = "embedded:" + dir_.path();
    o.job = "qos";
    o.chunk_size = 1 << 20;
    o.codec = CodecChoice::kRaw;
    o.qos_floor_Bps = 0;
    auto ck = Checkpointer::Open(o);
    EXPECT_TRUE(ck.ok()) << ck.status();
    if (ck.ok()) {
      testutil::FillPattern(data_, 7);
      EXPECT_TRUE(
          (*ck)->Register({"t", "U8", {int64_t(kBytes)}, data_.data()}).ok());
    }
    return ck.ok() ? std::move(*ck) : nullptr;
  }

  void ExpectLoadsBack(Checkpointer& ck, int64_t step) {
    std::vector<char> out(kBytes, 0);
    ck.ClearRegistrations();
    ASSERT_TRUE(ck.Register({"t", "U8", {int64_t(kBytes)}, out.data()}).ok());
    auto loaded = ck.Load(step);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(out, data_);
  }

  testutil::TempDir dir_;
  std::vector<char> data_ = std::vector<char>(kBytes);
};

// On a simulated clock (CheckpointerOptions::clock): the pacer's waits move
// it instead of taking real time.
TEST_F(QosSaveTest, DeadlineSpreadsTheSave) {
  qos::SimulatedClock clock;
  CheckpointerOptions o;
  o.qos_deadline_s = 1.0;
  o.clock = &clock;
  auto ck = Open(o);
  ASSERT_NE(ck, nullptr);
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->Wait().ok());
  SaveStats s = h->stats();
  // 16 chunks over the first 0.9 s (the last 10% is kept for the commit):
  // the last one may not start before 15/16 x 0.9 s = 0.84375 s, and is
  // not held past 0.9 s.
  EXPECT_GE(clock.NowNs(), 843750000);
  EXPECT_LE(clock.NowNs(), 900000000);
  EXPECT_GT(s.paced_rate_Bps, 0);
  EXPECT_EQ(s.bytes_shipped, kBytes);
  ExpectLoadsBack(*ck, 1);
}

TEST_F(QosSaveTest, PerSaveDeadlineOverridesTheOption) {
  CheckpointerOptions o;
  o.qos_deadline_s = 30;
  auto ck = Open(o);
  ASSERT_NE(ck, nullptr);
  SaveOptions so;
  so.deadline_s = 0;  // this one as fast as possible
  auto h = ck->Save(1, so);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_LT(h->stats().durable_s, 25);
  EXPECT_EQ(h->stats().paced_rate_Bps, 0);
  so.deadline_s = -5.0 / 0.0;
  EXPECT_EQ(ck->Save(2, so).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(QosSaveTest, ADeadlineThatCannotBeMetStillCompletesLate) {
  CheckpointerOptions o;
  o.qos_deadline_s = 0.05;
  o.qos_max_Bps = 40e6;  // 16 MiB at most 40 MB/s: about 0.4 s
  auto ck = Open(o);
  ASSERT_NE(ck, nullptr);
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->Wait().ok());
  SaveStats s = h->stats();
  EXPECT_GE(s.durable_s, 0.3);
  EXPECT_NEAR(s.late_s, s.durable_s - 0.05, 1e-9);
  ExpectLoadsBack(*ck, 1);
}

// A deadline the collectives leave no room for: the save still keeps out
// of the open collective (bytes and encoders), finishes late, and says so
// in its stats, the metrics and one log line.
TEST_F(QosSaveTest, ALateSaveStillKeepsOutOfCollectivesAndSaysSo) {
  CheckpointerOptions o;
  o.qos_deadline_s = 0.05;
  o.qos_yield = QosYield::kPause;
  auto ck = Open(o);
  ASSERT_NE(ck, nullptr);
  testing::internal::CaptureStderr();
  ck->CollectiveBegin();
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok());
  // Nothing may leave while the collective runs, however late the save.
  EXPECT_FALSE(h->Wait(absl::Milliseconds(300)).has_value());
  ck->CollectiveEnd();
  ASSERT_TRUE(h->Wait().ok());
  const std::string err = testing::internal::GetCapturedStderr();
  SaveStats s = h->stats();
  EXPECT_GE(s.durable_s, 0.3);
  EXPECT_NEAR(s.late_s, s.durable_s - 0.05, 1e-9);
  // The encoders wait out the collective first (the first chunk from 0 to
  // 300 ms), so the sender finds the gate open by the time it has chunks.
  EXPECT_GE(s.cpu_yield_s, 0.25);
  EXPECT_EQ(ck->Metrics().saves_late, 1u);
  EXPECT_NE(err.find("save of job 'qos' step 1 rank 0 was durable after"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("past its deadline of 0.05 s"), std::string::npos) << err;
  ExpectLoadsBack(*ck, 1);
}

// The threads that work after the stall, as /proc shows them.
struct ThreadInfo {
  int count = 0;
  int idle = 0;     // SCHED_IDLE
  int io_idle = 0;  // idle I/O class
};
ThreadInfo ThreadsNamed(const std::string& name) {
  ThreadInfo info;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string got;
    std::getline(comm, got);
    if (got != name) continue;
    ++info.count;
    auto sched = qos::ReadThreadSched(std::stoi(e.path().filename()));
    if (!sched.ok()) continue;
    info.idle += sched->policy == SCHED_IDLE;
    info.io_idle += sched->io_class == 3;
  }
  return info;
}

TEST_F(QosSaveTest, PipelineThreadsRunAtIdlePriorityOnTheCoresAllowed) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  {
    auto ck = Open({});
    ASSERT_NE(ck, nullptr);
    ThreadInfo enc = ThreadsNamed("stg-encode");
    EXPECT_EQ(enc.count, std::min(8, qos::ReadCpuShare().cores));
    EXPECT_EQ(enc.idle, enc.count);
    EXPECT_EQ(enc.io_idle, enc.count);
    ThreadInfo send = ThreadsNamed("stg-send");
    EXPECT_EQ(send.count, 1);
    EXPECT_EQ(send.idle, 1);
    auto h = ck->Save(1);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h->Wait().ok());
  }
  if (CPU_COUNT(&all) >= 2) {
    // One CPU allowed (as taskset or a launcher's binding would): one
    // encoder, not one per CPU of the machine.
    cpu_set_t one;
    CPU_ZERO(&one);
    int first = 0;
    while (!CPU_ISSET(first, &all)) ++first;
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    auto ck = Open({});
    ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
    ASSERT_NE(ck, nullptr);
    EXPECT_EQ(ThreadsNamed("stg-encode").count, 1);
    auto h = ck->Save(2);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h->Wait().ok());
  }
  {
    CheckpointerOptions o;
    o.background_cpu = BackgroundCpu::kNormal;
    o.pipeline_threads = 3;
    auto ck = Open(o);
    ASSERT_NE(ck, nullptr);
    ThreadInfo enc = ThreadsNamed("stg-encode");
    EXPECT_EQ(enc.count, 3);
    EXPECT_EQ(enc.idle, 0);
    EXPECT_EQ(ThreadsNamed("stg-send").idle, 0);
  }
}

// The collective ends 300 ms in, on a simulated clock: the sender's waits
// at the closed gate move the clock there, and nothing leaves before.
TEST_F(QosSaveTest, ACollectiveHoldsTheSaveBack) {
  qos::SimulatedClock clock;
  CheckpointerOptions o;
  o.qos_yield = QosYield::kPause;
  o.clock = &clock;
  auto ck = Open(o);
  ASSERT_NE(ck, nullptr);
  ck->CollectiveBegin();
  clock.ScheduleAt(300000000, [&ck] { ck->CollectiveEnd(); });
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_GE(clock.NowNs(), 300000000);
  // Held for the whole collective (the first wait began at 0): the
  // encoders wait it out before the sender sees a chunk (background_cpu
  // "idle", the default).
  EXPECT_GE(h->stats().cpu_yield_s, 0.3 - 1e-9);
  ExpectLoadsBack(*ck, 1);
}

TEST_F(QosSaveTest, ScopedCollectiveAndOffMode) {
  CheckpointerOptions o;
  o.qos_yield = QosYield::kOff;
  auto ck = Open(o);
  ASSERT_NE(ck, nullptr);
  CollectiveScope c(ck.get());
  auto h = ck->Save(1);  // "off": the open collective does not matter
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_EQ(h->stats().yield_s, 0);
}

// Moves a ManualClock in 1 ms steps, each once a thread sleeps on it, until
// done() or `limit_ns` has passed; returns the time moved.
template <typename Done>
int64_t StepClockUntil(qos::ManualClock& clock, Done done, int64_t limit_ns) {
  const int64_t from = clock.NowNs();
  while (!done() && clock.NowNs() - from < limit_ns) {
    // No sleeper: the sender is working (or finishing); look again.
    if (clock.AwaitSleepers(1, absl::Milliseconds(20))) clock.Advance(1000000);
  }
  return clock.NowNs() - from;
}

// The gate learns iterations of 400 ms (a collective in the first 300 ms),
// then the marks stop: the predicted collective is overdue, so the gate
// holds a save until its quiet time (4 periods after the last mark).
// Nobody waits for that save yet. Once the next Save() waits for it,
// training is taken to be stopped and only an open collective could hold
// it back, so save 1 finishes at once. Time is a ManualClock: it moves
// only in the test's steps, so "held" and "at once" are exact.
TEST_F(QosSaveTest, ASaveWaitedForStopsYieldingToPredictedCollectives) {
  constexpr int64_t kMs = 1000000;
  qos::ManualClock clock(kMs);
  CheckpointerOptions o;
  o.qos_yield = QosYield::kLearn;
  o.clock = &clock;
  auto ck = Open(o);
  ASSERT_NE(ck, nullptr);
  for (int i = 0; i < 6; ++i) {
    ck->IterationBegin();
    ck->CollectiveBegin();
    clock.Advance(300 * kMs);
    ck->CollectiveEnd();
    if (i < 5) clock.Advance(100 * kMs);
  }
  ASSERT_TRUE(ck->Metrics().gate_learned);
  // Past the next predicted start (100 ms on), with no mark: overdue.
  clock.Advance(150 * kMs);
  auto h1 = ck->Save(1);
  ASSERT_TRUE(h1.ok()) << h1.status();
  const auto h1_done = [&h1] { return h1->Done(); };
  EXPECT_EQ(StepClockUntil(clock, h1_done, 200 * kMs), 200 * kMs);
  ASSERT_FALSE(h1->Done()) << "the overdue collective should hold the save";
  std::optional<absl::StatusOr<SaveHandle>> h2;
  std::thread second([&] { h2 = ck->Save(2); });  // waits for save 1
  for (int i = 0; i < 1000 && ck->Metrics().callers_waiting == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(ck->Metrics().callers_waiting, 1);
  // The quiet time would open the gate 1.25 s from here; the waiting
  // caller releases save 1 within a few of the sender's 1 ms sleeps.
  const int64_t waited = StepClockUntil(clock, h1_done, 1500 * kMs);
  EXPECT_LE(waited, 10 * kMs);
  ASSERT_TRUE(h1->Wait().ok());
  second.join();
  ASSERT_TRUE(h2->ok()) << h2->status();
  // Save 2 has nobody waiting for it: the quiet time lets it go.
  const auto h2_done = [&h2] { return (*h2)->Done(); };
  StepClockUntil(clock, h2_done, 3000 * kMs);
  ASSERT_TRUE((*h2)->Wait().ok());
  ExpectLoadsBack(*ck, 1);
}

TEST_F(QosSaveTest, BadQosOptionsAreRejectedAtOpen) {
  CheckpointerOptions o;
  o.servers = "embedded:" + dir_.path();
  o.job = "qos";
  // A name the binding or the CLI passes on, and a value out of range.
  auto parsed = ParseQosYield("always");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "qos_yield 'always' unknown (off, pause, learn)");
  EXPECT_EQ(*ParseQosYield("pause"), QosYield::kPause);
  EXPECT_EQ(NameOf(QosYield::kLearn), "learn");
  o.qos_yield = static_cast<QosYield>(7);
  auto ck = Checkpointer::Open(o);
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ck.status().message().find("qos_yield"), std::string::npos);
}

}  // namespace
}  // namespace stagger

namespace stagger {
namespace {

// 16 clients save at once to one server whose admission budget holds only
// a few chunks: every save completes intact and none is starved (the last
// to finish took at most a few times the median).
TEST(QosAdmissionTest, SixteenClientsWithSmallCreditsAllFinishFairly) {
  testutil::TempDir dir;
  auto server = testutil::ServerProcess::Start(dir.path() + "/data",
                                               {"--ingest-budget-mib", "2"});
  ASSERT_TRUE(server.ok()) << server.status();
  constexpr int kClients = 16;
  constexpr size_t kEach = 8 << 20;
  std::vector<std::unique_ptr<Checkpointer>> cks;
  std::vector<std::vector<char>> data(kClients, std::vector<char>(kEach));
  for (int i = 0; i < kClients; ++i) {
    CheckpointerOptions o;
    o.servers = (*server)->grpc();
    o.job = "fair" + std::to_string(i);
    o.chunk_size = 256 << 10;
    o.codec = CodecChoice::kRaw;
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    testutil::FillPattern(data[i], 100 + i);
    ASSERT_TRUE(
        (*ck)->Register({"t", "U8", {int64_t(kEach)}, data[i].data()}).ok());
    cks.push_back(std::move(*ck));
  }
  // All saves start together (one thread each, released at once): called
  // one after another, the first would have the server to itself for the
  // others' snapshot time and could finish before they began.
  std::vector<std::optional<Result<SaveHandle>>> handles(kClients);
  std::vector<double> started(kClients);  // s after the release
  absl::Notification go;
  std::vector<std::thread> starters;
  const auto release =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  for (int i = 0; i < kClients; ++i) {
    starters.emplace_back([&, i] {
      go.WaitForNotification();
      std::this_thread::sleep_until(release);
      started[i] = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - release)
                       .count();
      handles[i] = cks[i]->Save(1);
    });
  }
  go.Notify();
  for (auto& t : starters) t.join();
  // When each save was durable, counted from the common release: a save
  // whose thread the scheduler started late (two cores, other tests
  // running) ends late too, and is not taken for one served unfairly.
  std::vector<double> done;
  for (int i = 0; i < kClients; ++i) {
    auto& h = handles[i];
    ASSERT_TRUE((*h).ok()) << (*h).status();
    ASSERT_TRUE((*h)->Wait().ok()) << (*h)->Wait();
    done.push_back(started[i] + (*h)->stats().durable_s);
  }
  std::vector<double> sorted = done;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[kClients / 2];
  // Fair shares progress together and finish close together; served in
  // arrival order (or with some starved), the first quarter would finish
  // within a quarter of the way through (0.25 of the last) and the last
  // trail by the whole queue. The quarter, not the first alone: one save
  // whose commit's fsync came before the disk got busy (make test right
  // after a build) ended at 0.18-0.19 of the last while the rest ran fair
  // (median 0.87 of it).
  EXPECT_GE(sorted[kClients / 4], 0.4 * sorted.back())
      << "first durable at " << sorted.front() << " s, the " << kClients / 4 + 1
      << "th at " << sorted[kClients / 4] << " s, last at " << sorted.back()
      << " s, median " << median << " s";
  for (int i = 0; i < kClients; ++i) {
    std::vector<char> out(kEach, 0);
    cks[i]->ClearRegistrations();
    ASSERT_TRUE(
        cks[i]->Register({"t", "U8", {int64_t(kEach)}, out.data()}).ok());
    auto loaded = cks[i]->Load(1);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(out, data[i]) << "client " << i;
  }
}

}  // namespace
}  // namespace stagger
