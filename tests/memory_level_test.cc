// The memory tier against real stagger-server processes, each in a failure
// domain of its own (--domain n0, n1, n2, --memory-bytes), two copies of
// every chunk: a save with durability "memory" is complete while its
// chunks are in RAM only, becomes disk-level behind, survives SIGKILL of
// one server holding it, and disappears (the disk-level step before it is
// latest) when every server is killed before it reached a disk.
// tests/python/test_memory_restart.py: the servers promote without the
// trainer, and a graceful restart of every server keeps the step.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "metrics/http_exporter.h"
#include "metrics/text_format.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using testutil::ServerProcess;

constexpr size_t kChunk = 64 << 10;
constexpr size_t kChunks = 24;  // every server ranks first for some

class MemoryLevelTest : public ::testing::Test {
 protected:
  // Three servers; `delay_ms`: how long a held chunk waits for its write
  // to disk (--write-behind-delay-ms), so that a test sees it memory-only.
  void StartServers(int64_t delay_ms,
                    const std::vector<std::string>& domains = {"n0", "n1",
                                                               "n2"},
                    const std::string& memory = "64M") {
    delay_ms_ = delay_ms;
    memory_ = memory;
    domains_ = domains;
    for (size_t i = 0; i < domains.size(); ++i) {
      auto s = ServerProcess::Start(Dir(i), Args(i, "127.0.0.1:0"));
      ASSERT_TRUE(s.ok()) << s.status();
      servers_.push_back(std::move(*s));
    }
  }
  std::string Dir(size_t i) const {
    return dir_.path() + "/" + std::to_string(i);
  }
  std::vector<std::string> Args(size_t i, const std::string& listen) const {
    return {"--domain",
            domains_[i],
            "--node",
            "node" + std::to_string(i),
            "--memory-bytes",
            memory_,
            "--write-behind-delay-ms",
            std::to_string(delay_ms_),
            "--metrics-listen",
            "127.0.0.1:0",
            "--listen",
            listen};
  }
  // Restarts server `i` (killed) on its address and data directory.
  void Restart(size_t i) {
    const std::string at = servers_[i]->grpc();
    servers_[i].reset();
    auto s = ServerProcess::Start(Dir(i), Args(i, at));
    ASSERT_TRUE(s.ok()) << s.status();
    servers_[i] = std::move(*s);
  }
  std::string List() const {
    std::string list;
    for (const auto& s : servers_) {
      list += (list.empty() ? "" : ",") + s->grpc();
    }
    return list;
  }
  Result<std::unique_ptr<Checkpointer>> Open(
      std::vector<char>* w, CodecChoice codec = CodecChoice::kRaw,
      const std::string& node = "elsewhere") {
    CheckpointerOptions o;
    o.servers = List();
    o.job = "mem";
    o.replicas = 2;
    o.chunk_size = kChunk;
    o.rpc_timeout_s = 10;
    o.durability = Durability::kMemory;
    o.codec = codec;  // kRaw: stored bytes == raw bytes
    o.adaptive_codec = false;
    o.node = node;  // by default on none of the servers' nodes
    auto ck = Checkpointer::Open(o);
    if (!ck.ok()) return ck;
    Status s = (*ck)->Register({"w", "U8", {int64_t(w->size())}, w->data()});
    if (!s.ok()) return s;
    return ck;
  }
  static Status Save(Checkpointer& ck, std::vector<char>& w, int64_t step,
                     Durability d = Durability::kDefault) {
    testutil::FillPattern(w, testutil::WeightSeed(0, step));
    SaveOptions so;
    so.durability = d;
    auto h = ck.Save(step, so);
    if (!h.ok()) return h.status();
    return h->Wait();
  }
  // Loads `want` (kLatestStep: the newest) with a new Checkpointer, as a
  // restarted trainer would, and checks it holds step `expect`'s bytes.
  void ExpectLoads(int64_t want, int64_t expect) {
    std::vector<char> w(kChunks * kChunk, 0);
    auto ck = Open(&w);
    ASSERT_TRUE(ck.ok()) << ck.status();
    auto got = (*ck)->Load(want);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, expect);
    std::vector<char> pattern(w.size());
    testutil::FillPattern(pattern, testutil::WeightSeed(0, expect));
    EXPECT_TRUE(w == pattern) << "step " << expect << " not bit-exact";
  }
  double Metric(size_t i, const std::string& name) {
    auto page = metrics::HttpGet(servers_[i]->metrics(), "/metrics");
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) return -1;
    auto v = metrics::SampleValue(*page, name);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }
  double Sum(const std::string& name) {
    double sum = 0;
    for (size_t i = 0; i < servers_.size(); ++i) sum += Metric(i, name);
    return sum;
  }
  testutil::RunResult LsJson() {
    return testutil::RunProcess({testutil::BinDir() + "/stagger", "--server",
                                 List(), "ls", "--job", "mem", "--json"});
  }

  testutil::TempDir dir_;
  int64_t delay_ms_ = 0;
  std::string memory_;
  std::vector<std::string> domains_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

TEST_F(MemoryLevelTest, CompleteInMemoryThenDiskLevelBehind) {
  StartServers(/*delay_ms=*/2500);
  std::vector<char> w(kChunks * kChunk);
  auto ck = Open(&w);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(Save(**ck, w, 1).ok());
  // Complete, with every copy in RAM and none on a disk yet.
  EXPECT_EQ(Sum("stagger_server_memory_puts_total"), 2 * kChunks);
  EXPECT_EQ(Sum("stagger_server_memory_only_bytes"), 2.0 * kChunks * kChunk);
  EXPECT_EQ(Sum("stagger_server_chunks_written_total"), 0);
  auto steps = (*ck)->Steps(false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_TRUE((*steps)[0].complete);
  EXPECT_TRUE((*steps)[0].in_memory);
  testutil::RunResult ls = LsJson();
  EXPECT_EQ(ls.exit_code, 0) << ls.out;
  EXPECT_NE(ls.out.find("\"tiers\":[\"memory\"],\"level\":\"memory\"}"),
            std::string::npos)
      << ls.out;
  // Read from memory: a restarted trainer loads it.
  ExpectLoads(kLatestStep, 1);
  EXPECT_GE(Sum("stagger_server_memory_reads_total"), kChunks);
  // Written behind, then made disk-level by the saving Checkpointer.
  Status disk = (*ck)->WaitDisk(absl::Seconds(30));
  ASSERT_TRUE(disk.ok()) << disk;
  EXPECT_EQ(Sum("stagger_server_chunks_written_total"), 2 * kChunks);
  EXPECT_EQ(Sum("stagger_server_memory_only_bytes"), 0);
  steps = (*ck)->Steps(false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_FALSE((*steps)[0].in_memory);
  ls = LsJson();
  EXPECT_NE(ls.out.find("\"tiers\":[\"disk\"],\"level\":\"disk\"}"),
            std::string::npos)
      << ls.out;
  // Disk-level steps outlive a restart of every server (read by a new
  // Checkpointer, as a new trainer process would).
  ck->reset();
  for (size_t i = 0; i < servers_.size(); ++i) {
    servers_[i]->Stop(SIGKILL);
    ASSERT_NO_FATAL_FAILURE(Restart(i));
  }
  ExpectLoads(kLatestStep, 1);
}

TEST_F(MemoryLevelTest,
       AFullTierTakesSavesAtTheDisksPaceAndEvictsWhatIsOnDisk) {
  // 512 KiB of RAM each, 8 chunks' worth, for the 16 copies a server gets
  // of a step: the rest is acknowledged once on disk.
  StartServers(/*delay_ms=*/0, {"n0", "n1", "n2"}, "512K");
  std::vector<char> w(kChunks * kChunk);
  auto ck = Open(&w);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(Save(**ck, w, 1).ok());
  const double held = Sum("stagger_server_memory_puts_total");
  const double refused = Sum("stagger_server_memory_puts_refused_total");
  EXPECT_EQ(held + refused, 2 * kChunks);
  EXPECT_GT(refused, 0);
  // More than 8 a server may have been held: a chunk written behind while
  // the save goes on is evicted to make room for the next put.
  EXPECT_GT(held, 0);
  for (size_t i = 0; i < servers_.size(); ++i) {
    EXPECT_LE(Metric(i, "stagger_server_memory_bytes"), 512 << 10);
  }
  ASSERT_TRUE((*ck)->WaitDisk(absl::Seconds(30)).ok());
  // Step 2 changes every chunk: what step 1 left in memory is on disk by
  // now, and makes room for it.
  ASSERT_TRUE(Save(**ck, w, 2).ok());
  EXPECT_GT(Sum("stagger_server_memory_evictions_total"), 0);
  ASSERT_TRUE((*ck)->WaitDisk(absl::Seconds(30)).ok());
  ExpectLoads(1, 1);
  ExpectLoads(kLatestStep, 2);
}

TEST_F(MemoryLevelTest, RefusedWithFewerDomainsThanCopies) {
  StartServers(/*delay_ms=*/0, {"rack", "rack", "rack"});
  std::vector<char> w(kChunks * kChunk);
  auto ck = Open(&w);
  ASSERT_TRUE(ck.ok()) << ck.status();
  Status s = Save(**ck, w, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("needs its 2 copies in 2 failure domains, and "
                             "the servers up are in 1 (rack)"),
            std::string::npos)
      << s;
  // The same servers take it at disk level.
  EXPECT_TRUE(Save(**ck, w, 1, Durability::kDisk).ok());
  ExpectLoads(kLatestStep, 1);
}

// A step saved as deltas of the one before, held in memory, written behind
// and rebased (its chunks whole on disk, the older ones deltas of them)
// while the tier still holds the deltas as they came: a load reads every
// byte, not a circle of deltas (this chunk -> its base -> this chunk).
TEST_F(MemoryLevelTest, DeltasHeldInMemoryAfterTheirRebaseLoad) {
  StartServers(/*delay_ms=*/0);
  std::vector<char> w(kChunks * kChunk);
  auto ck = Open(&w, CodecChoice::kAuto);
  ASSERT_TRUE(ck.ok()) << ck.status();
  testutil::FillPattern(w, testutil::WeightSeed(0, 1));
  auto h1 = (*ck)->Save(1, SaveOptions{.durability = Durability::kDisk});
  ASSERT_TRUE(h1.ok() && h1->Wait().ok());
  for (size_t i = 0; i < w.size(); i += 1024) w[i] ^= 0x5a;  // every chunk
  const std::vector<char> two = w;
  auto h2 = (*ck)->Save(2);
  ASSERT_TRUE(h2.ok() && h2->Wait().ok());
  ASSERT_TRUE((*ck)->WaitDisk(absl::Seconds(60)).ok());
  for (int i = 0;
       i < 240 && Sum("stagger_server_rebased_chunks_total") < 2.0 * kChunks;
       ++i) {
    absl::SleepFor(absl::Milliseconds(250));
  }
  ASSERT_EQ(Sum("stagger_server_rebased_chunks_total"), 2.0 * kChunks);
  ASSERT_GT(Sum("stagger_server_memory_chunks"), 0);  // still held
  std::vector<char> out(w.size(), 0);
  auto loader = Open(&out, CodecChoice::kAuto);
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto got = (*loader)->Load(kLatestStep);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2);
  EXPECT_TRUE(out == two);
}

// Local first: a trainer on node1 puts the first copy of every chunk on
// node1's server (the second in another domain), and a trainer restarted
// there reads every chunk from it: the other servers send nothing.
TEST_F(MemoryLevelTest, FirstCopyOnTheTrainersNodeAndReadFromThere) {
  StartServers(/*delay_ms=*/0);
  std::vector<char> w(kChunks * kChunk);
  auto ck = Open(&w, CodecChoice::kRaw, "node1");
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(Save(**ck, w, 1).ok());
  EXPECT_EQ(Metric(1, "stagger_server_memory_puts_total"), kChunks);
  EXPECT_EQ(Metric(0, "stagger_server_memory_puts_total") +
                Metric(2, "stagger_server_memory_puts_total"),
            kChunks);
  std::vector<double> read(3);
  for (size_t i = 0; i < 3; ++i) {
    read[i] = Metric(i, "stagger_server_chunks_read_total");
  }
  std::vector<char> out(w.size(), 0);
  auto loader = Open(&out, CodecChoice::kRaw, "node1");
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto got = (*loader)->Load(kLatestStep);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 1);
  EXPECT_TRUE(out == w);
  EXPECT_EQ(Metric(1, "stagger_server_chunks_read_total") - read[1], kChunks);
  EXPECT_EQ(Metric(0, "stagger_server_chunks_read_total"), read[0]);
  EXPECT_EQ(Metric(2, "stagger_server_chunks_read_total"), read[2]);
  // A trainer on another node reads by the writer's placement, node1's
  // copy first: bit-exact, and still nothing from the others.
  std::vector<char> far(w.size(), 0);
  auto other = Open(&far, CodecChoice::kRaw, "node9");
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->Load(kLatestStep).ok());
  EXPECT_TRUE(far == w);
  EXPECT_EQ(Metric(1, "stagger_server_chunks_read_total") - read[1],
            2 * kChunks);
}

TEST_F(MemoryLevelTest, OneServerKilledTheStepLoadsFromTheOtherCopies) {
  StartServers(/*delay_ms=*/3000);
  std::vector<char> w(kChunks * kChunk);
  auto ck = Open(&w);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(Save(**ck, w, 1).ok());
  servers_[0]->Stop(SIGKILL);
  // Every chunk had a copy in another domain's RAM.
  ExpectLoads(kLatestStep, 1);
  // The copies it held never reached its disk: the others write theirs,
  // and the servers copy each chunk left with one copy on disk to the
  // third server, then make the step disk-level, with no client's help
  // (the client's own promotion may have said "degraded" before that).
  Status disk = (*ck)->WaitDisk(absl::Seconds(60));
  EXPECT_TRUE(disk.ok() || absl::IsFailedPrecondition(disk)) << disk;
  bool on_disk = false;
  for (int i = 0; i < 240 && !on_disk; ++i) {
    auto steps = (*ck)->Steps(false);
    ASSERT_TRUE(steps.ok()) << steps.status();
    ASSERT_EQ(steps->size(), 1u);
    on_disk = !(*steps)[0].in_memory;
    if (!on_disk) absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_TRUE(on_disk) << "still memory-level after 60 s";
  EXPECT_GT(Metric(1, "stagger_server_memory_chunks_repaired_total") +
                Metric(2, "stagger_server_memory_chunks_repaired_total"),
            0);
  ExpectLoads(kLatestStep, 1);
  // Back without what it held in memory: its memory-level shard (if it
  // was a coordinator) is set aside at start and brought back once the
  // copies are confirmed; the other coordinator's serves the step.
  ASSERT_NO_FATAL_FAILURE(Restart(0));
  ExpectLoads(kLatestStep, 1);
}

TEST_F(MemoryLevelTest, EveryServerKilledBeforeDiskTheStepIsGone) {
  StartServers(/*delay_ms=*/60000);
  std::vector<char> w(kChunks * kChunk);
  auto ck = Open(&w);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(Save(**ck, w, 1, Durability::kDisk).ok());
  ASSERT_TRUE(Save(**ck, w, 2).ok());
  ExpectLoads(kLatestStep, 2);
  for (size_t i = 0; i < servers_.size(); ++i) {
    servers_[i]->Stop(SIGKILL);
    ASSERT_NO_FATAL_FAILURE(Restart(i));
  }
  // Never listed complete with bytes missing: step 1 is latest again at
  // once (step 2 set aside, partial), and once the servers found its
  // chunks on none of their disks, step 2 is gone.
  testutil::RunResult ls = LsJson();
  EXPECT_EQ(ls.out.find("\"step\":2,\"state\":\"complete\""), std::string::npos)
      << ls.out;
  ExpectLoads(kLatestStep, 1);
  for (int i = 0; i < 180 && ls.out.find("\"step\":2") != std::string::npos;
       ++i) {
    absl::SleepFor(absl::Milliseconds(250));
    ls = LsJson();
  }
  EXPECT_EQ(ls.out.find("\"step\":2"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("\"tiers\":[\"disk\"],\"level\":\"disk\"}"),
            std::string::npos)
      << ls.out;
}

}  // namespace
}  // namespace stagger
