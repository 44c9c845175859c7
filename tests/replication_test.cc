// Replication and failover against real stagger-server processes killed
// with SIGKILL: with replicas=2 over three servers, a save survives the
// death of one server (its copies go to the next server of each chunk's
// ranking), every saved step still loads bit-exactly from the servers
// left, and a save that cannot get two copies fails UNAVAILABLE naming
// the servers down while the last complete step stays loadable.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "format/record.h"
#include "gtest/gtest.h"
#include "metrics/http_exporter.h"
#include "metrics/text_format.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using testutil::ServerProcess;

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a", "b", "c"}) {
      auto s = ServerProcess::Start(dir_.path() + "/" + name);
      ASSERT_TRUE(s.ok()) << s.status();
      servers_.push_back(std::move(*s));
    }
    w_.resize(6 << 20);
    b_.resize(300 << 10);
  }
  std::string List() const {
    return servers_[0]->grpc() + "," + servers_[1]->grpc() + "," +
           servers_[2]->grpc();
  }
  Result<std::unique_ptr<Checkpointer>> Open(uint32_t replicas = 2) {
    CheckpointerOptions o;
    o.servers = List();
    o.job = "rep";
    o.replicas = replicas;
    o.chunk_size = 256 << 10;  // 26 chunks: every server ranks first for some
    o.rpc_timeout_s = 10;
    auto ck = Checkpointer::Open(o);
    if (!ck.ok()) return ck;
    Status s = (*ck)->Register({"w", "U8", {int64_t(w_.size())}, w_.data()});
    if (s.ok()) {
      s = (*ck)->Register({"b", "U8", {int64_t(b_.size())}, b_.data()});
    }
    if (!s.ok()) return s;
    return ck;
  }
  void Fill(int64_t step) {
    testutil::FillPattern(w_, testutil::WeightSeed(0, step));
    testutil::FillPattern(b_, testutil::BiasSeed(0, step));
  }
  // Loads `step` into zeroed tensors and checks every byte.
  void ExpectLoads(Checkpointer& ck, int64_t step, int64_t as_step) {
    std::fill(w_.begin(), w_.end(), 0);
    std::fill(b_.begin(), b_.end(), 0);
    auto got = ck.Load(step);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, as_step);
    std::vector<char> w(w_.size()), b(b_.size());
    testutil::FillPattern(w, testutil::WeightSeed(0, as_step));
    testutil::FillPattern(b, testutil::BiasSeed(0, as_step));
    EXPECT_TRUE(w == w_) << "tensor w of step " << as_step << " differs";
    EXPECT_TRUE(b == b_) << "tensor b of step " << as_step << " differs";
  }
  Status SaveStep(Checkpointer& ck, int64_t step) {
    Fill(step);
    auto h = ck.Save(step);
    if (!h.ok()) return h.status();
    return h->Wait();
  }

  testutil::TempDir dir_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<char> w_, b_;
};

// Four servers in two failure domains (--domain x, x, y, y), two copies:
// every chunk has one copy in each domain, so a whole domain lost (both
// its servers killed) leaves every step loadable from the other.
TEST(ReplicationDomainTest, CopiesGoToDistinctDomains) {
  testutil::TempDir dir;
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::string list;
  for (const char* domain : {"x", "x", "y", "y"}) {
    auto s = ServerProcess::Start(
        dir.path() + "/" + std::to_string(servers.size()),
        {"--domain", domain, "--metrics-listen", "127.0.0.1:0"});
    ASSERT_TRUE(s.ok()) << s.status();
    list += (list.empty() ? "" : ",") + (*s)->grpc();
    servers.push_back(std::move(*s));
  }
  CheckpointerOptions o;
  o.servers = list;
  o.job = "dom";
  o.replicas = 2;
  o.chunk_size = 64 << 10;
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  std::vector<char> w(40 * o.chunk_size);
  testutil::FillPattern(w, testutil::WeightSeed(0, 1));
  ASSERT_TRUE((*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
  auto h = (*ck)->Save(1);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->Wait().ok()) << h->Wait();
  double written[4];
  for (size_t i = 0; i < 4; ++i) {
    auto page = metrics::HttpGet(servers[i]->metrics(), "/metrics");
    ASSERT_TRUE(page.ok()) << page.status();
    auto v = metrics::SampleValue(*page, "stagger_server_chunks_written_total");
    ASSERT_TRUE(v.ok()) << v.status();
    written[i] = *v;
  }
  EXPECT_EQ(written[0] + written[1], 40) << "copies in domain x";
  EXPECT_EQ(written[2] + written[3], 40) << "copies in domain y";
  // Domain x lost: step 1 loads from y.
  servers[0]->Stop(SIGKILL);
  servers[1]->Stop(SIGKILL);
  std::fill(w.begin(), w.end(), 0);
  auto got = (*ck)->Load(1);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<char> want(w.size());
  testutil::FillPattern(want, testutil::WeightSeed(0, 1));
  EXPECT_TRUE(w == want);
}

TEST_F(ReplicationTest, SaveFailsOverAndEveryStepLoadsFromTheSurvivors) {
  auto ck = Open();
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(SaveStep(**ck, 1).ok());

  // Server a dies between saves; the open client learns it from the puts
  // of step 2, which go to the next server of each ranking instead.
  servers_[0]->Stop(SIGKILL);
  EXPECT_EQ((*ck)->Metrics().servers_down, 0u);
  Status s2 = SaveStep(**ck, 2);
  ASSERT_TRUE(s2.ok()) << s2;
  EXPECT_EQ((*ck)->Metrics().servers_down, 1u);

  // A fresh client opens with a down, and reads both steps.
  auto fresh = Open();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ExpectLoads(**fresh, kLatestStep, 2);
  ExpectLoads(**fresh, 1, 1);

  // The CLI reads past the dead server too; gc, which deletes, refuses.
  const std::string cli = testutil::BinDir() + "/stagger";
  testutil::RunResult verify = testutil::RunProcess(
      {cli, "--server", List(), "verify", "--job", "rep", "--step", "1"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  EXPECT_NE(verify.out.find("all 26 chunks good"), std::string::npos)
      << verify.out;
  testutil::RunResult gc = testutil::RunProcess(
      {cli, "--server", List(), "gc", "--job", "rep", "--keep", "1"});
  EXPECT_NE(gc.exit_code, 0) << gc.out;
  EXPECT_NE(gc.out.find("needs every server up"), std::string::npos) << gc.out;

  // With b gone too, c alone holds a copy of every chunk of step 2 (saved
  // with a down: two copies over b and c).
  servers_[1]->Stop(SIGKILL);
  Status s3 = SaveStep(**fresh, 3);
  EXPECT_EQ(s3.code(), absl::StatusCode::kUnavailable) << s3;
  EXPECT_NE(s3.message().find(servers_[0]->grpc()), std::string::npos) << s3;
  ExpectLoads(**fresh, kLatestStep, 2);

  auto last = Open();
  ASSERT_TRUE(last.ok()) << last.status();
  ExpectLoads(**last, kLatestStep, 2);
  // One copy asked: every server must answer.
  EXPECT_EQ(Open(1).status().code(), absl::StatusCode::kUnavailable);
}

// A server killed at a random point of a save: the save either completes
// or fails with a clear error, and the newest complete step always loads
// bit-exactly.
TEST_F(ReplicationTest, ARestartedServerTakesCopiesOfTheNextSaves) {
  auto ck = Open();
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(SaveStep(**ck, 1).ok());

  // Server a restarts (same port and data) between two saves, now with a
  // metrics page to count what it receives.
  const std::string a = servers_[0]->grpc();
  servers_[0]->Stop(SIGTERM);
  auto back = ServerProcess::Start(
      dir_.path() + "/a", {"--listen", a, "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(back.ok()) << back.status();
  servers_[0] = std::move(*back);

  // Step 2 finds a's connection broken and fails its copies over to b and
  // c; the client's prober brings a back behind it.
  ASSERT_TRUE(SaveStep(**ck, 2).ok());
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*ck)->Metrics().servers_down != 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ((*ck)->Metrics().servers_down, 0u) << "a was never probed back";

  Status s3 = SaveStep(**ck, 3);
  ASSERT_TRUE(s3.ok()) << s3;
  auto page = metrics::HttpGet(servers_[0]->metrics(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  auto written =
      metrics::SampleValue(*page, "stagger_server_chunks_written_total");
  ASSERT_TRUE(written.ok()) << written.status();
  // 26 chunks x 2 copies over 3 servers: a ranks in the first two for some.
  EXPECT_GT(*written, 0) << "the restarted server took no copy of step 3";
  std::printf("restarted server a wrote %.0f chunks of step 3\n", *written);

  // Every chunk of step 3 has its two copies.
  const std::string cli = testutil::BinDir() + "/stagger";
  testutil::RunResult verify = testutil::RunProcess(
      {cli, "--server", List(), "verify", "--job", "rep", "--step", "3"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
  EXPECT_NE(verify.out.find("all 26 chunks good"), std::string::npos)
      << verify.out;
  EXPECT_EQ(verify.out.find("DEGRADED"), std::string::npos) << verify.out;
  ExpectLoads(**ck, kLatestStep, 3);
}

TEST_F(ReplicationTest, KillDuringSaveNeverLosesTheLastCompleteStep) {
  auto ck = Open();
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(SaveStep(**ck, 1).ok());
  std::mt19937 rng(7);
  std::thread killer([this, delay_us = rng() % 40000] {
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    servers_[2]->Stop(SIGKILL);
  });
  Status s = SaveStep(**ck, 2);
  killer.join();
  // Two servers are left for two copies: the save completes.
  ASSERT_TRUE(s.ok()) << s;
  ExpectLoads(**ck, kLatestStep, 2);
  ASSERT_TRUE(SaveStep(**ck, 3).ok());
  auto fresh = Open();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ExpectLoads(**fresh, kLatestStep, 3);
  ExpectLoads(**fresh, 2, 2);
}

// One stored record: where it is and which chunk it holds.
struct Record {
  std::string path;
  uint64_t offset, size;
  std::string chunk;  // id bytes
};

// Walks every segment of job `job` under the servers' data directories,
// record by record (header lengths), up to the zeros of reserved space.
std::vector<Record> Records(const std::string& root, const std::string& job) {
  std::vector<Record> out;
  for (const char* name : {"a", "b", "c"}) {
    const std::string dir = root + "/" + name + "/segments/" + job;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      std::ifstream f(e.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(f)),
                        std::istreambuf_iterator<char>());
      for (uint64_t off = 0; off + format::kRecordHeaderSize <= bytes.size();) {
        auto h = format::DecodeRecordHeader(
            std::string_view(bytes).substr(off, format::kRecordHeaderSize));
        if (!h.ok()) break;
        const uint64_t size = format::RecordSize(h->encoded_length);
        out.push_back({e.path().string(), off, size, h->chunk_id.ToBytes()});
        off += size;
      }
    }
  }
  return out;
}

void FlipByte(const Record& r, uint64_t at) {
  std::fstream f(r.path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(r.offset + at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(r.offset + at);
  f.write(&c, 1);
}

// 100 byte flips, in 10 rounds of 10, each in a different chunk's copy
// (header, payload or padding): verify finds every one, a load still
// returns the right bytes from the other copy, verify --repair rewrites
// them, and verify then finds the step whole.
TEST_F(ReplicationTest, EveryByteFlipIsFoundAndRepaired) {
  CheckpointerOptions o;
  o.servers = List();
  o.job = "flip";
  o.replicas = 2;
  o.codec = CodecChoice::kRaw;
  o.chunk_size = 64 << 10;  // 101 chunks, 202 copies
  {
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    ASSERT_TRUE(
        (*ck)->Register({"w", "U8", {int64_t(w_.size())}, w_.data()}).ok());
    ASSERT_TRUE(
        (*ck)->Register({"b", "U8", {int64_t(b_.size())}, b_.data()}).ok());
    ASSERT_TRUE(SaveStep(**ck, 1).ok());
  }
  std::vector<Record> records = Records(dir_.path(), "flip");
  ASSERT_EQ(records.size(), 202u);
  // One copy per chunk may be flipped: the other stays good.
  std::mt19937 rng(11);
  std::shuffle(records.begin(), records.end(), rng);
  std::vector<Record> targets;
  std::set<std::string> chunks;
  for (const Record& r : records) {
    if (chunks.insert(r.chunk).second) targets.push_back(r);
  }
  ASSERT_GE(targets.size(), 100u);
  const std::string cli = testutil::BinDir() + "/stagger";
  auto verify = [&](bool repair) {
    std::vector<std::string> args = {cli,      "--server", List(),
                                     "verify", "--job",    "flip"};
    if (repair) args.push_back("--repair");
    return testutil::RunProcess(args);
  };
  size_t read_repaired = 0;
  for (int round = 0; round < 10; ++round) {
    for (int k = 0; k < 10; ++k) {
      const Record& r = targets[round * 10 + k];
      FlipByte(r, rng() % r.size);
    }
    testutil::RunResult found = verify(false);
    EXPECT_EQ(found.exit_code, 1) << found.out;
    EXPECT_NE(found.out.find("10 of 101 chunks bad"), std::string::npos)
        << "round " << round << ": " << found.out;
    size_t bad_lines = 0;
    for (size_t at = 0;
         (at = found.out.find("BAD rank", at)) != std::string::npos; ++at) {
      ++bad_lines;
    }
    EXPECT_EQ(bad_lines, 10u) << found.out;
    {
      auto loader = Checkpointer::Open(o);
      ASSERT_TRUE(loader.ok()) << loader.status();
      std::vector<char> w(w_.size()), b(b_.size());
      ASSERT_TRUE(
          (*loader)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
      ASSERT_TRUE(
          (*loader)->Register({"b", "U8", {int64_t(b.size())}, b.data()}).ok());
      auto got = (*loader)->Load(kLatestStep);
      ASSERT_TRUE(got.ok()) << got.status();
      Fill(1);
      EXPECT_TRUE(w == w_ && b == b_) << "round " << round;
    }
    // The load read the bad copies it met first and put good bytes back
    // (read repair, finished when the loader closed); --repair rewrites the
    // rest.
    testutil::RunResult fixed = verify(true);
    EXPECT_EQ(fixed.exit_code, 0) << fixed.out;
    size_t left = 0;
    const size_t at = fixed.out.find(" chunks bad; repaired ");
    if (at != std::string::npos) {
      const size_t start =
          fixed.out.rfind(' ', fixed.out.rfind(" of ", at) - 1);
      left = std::stoul(fixed.out.substr(start + 1));
      EXPECT_NE(fixed.out.find(absl::StrCat("repaired ", left, " copies of ",
                                            left, " chunks")),
                std::string::npos)
          << fixed.out;
    } else {
      EXPECT_NE(fixed.out.find("all 101 chunks good"), std::string::npos)
          << fixed.out;
    }
    ASSERT_LE(left, 10u) << fixed.out;
    read_repaired += 10 - left;
    testutil::RunResult clean = verify(false);
    EXPECT_EQ(clean.exit_code, 0) << clean.out;
    EXPECT_NE(clean.out.find("all 101 chunks good"), std::string::npos)
        << clean.out;
  }
  // About half the flipped copies are the first a load asks for.
  EXPECT_GE(read_repaired, 20u);
  std::printf("%zu of 100 flipped copies repaired by loads\n", read_repaired);
}

// Twenty saves, each from a freshly opened client (a restarted job), with
// a random server killed at a random point of the save and restarted on
// its address afterwards: every save completes on the two servers left,
// and the newest step always loads bit-exactly.
TEST_F(ReplicationTest, TwentySavesWithAServerKilledInEach) {
  std::mt19937 rng(23);
  int failed_over = 0;  // saves whose client saw the kill
  for (int64_t step = 1; step <= 20; ++step) {
    auto ck = Open();
    ASSERT_TRUE(ck.ok()) << "step " << step << ": " << ck.status();
    const size_t victim = rng() % servers_.size();
    const auto delay = std::chrono::microseconds(rng() % 30000);
    std::thread killer([&, victim, delay] {
      std::this_thread::sleep_for(delay);
      servers_[victim]->Stop(SIGKILL);
    });
    Status s = SaveStep(**ck, step);
    failed_over += (*ck)->Metrics().servers_down > 0 ? 1 : 0;
    killer.join();
    EXPECT_TRUE(s.ok()) << "step " << step << ": " << s;
    ExpectLoads(**ck, kLatestStep, step);
    const std::string addr = servers_[victim]->grpc();
    const std::string data = dir_.path() + "/" + "abc"[victim];
    servers_[victim].reset();
    auto back = ServerProcess::Start(data, {"--listen", addr});
    ASSERT_TRUE(back.ok()) << back.status();
    servers_[victim] = std::move(*back);
  }
  // Most kills land inside the save (the rest just after it).
  EXPECT_GE(failed_over, 5);
  std::printf("%d of 20 saves failed over\n", failed_over);
  auto fresh = Open();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ExpectLoads(**fresh, kLatestStep, 20);
  ExpectLoads(**fresh, 10, 10);
}

TEST_F(ReplicationTest, ReplicasAreValidated) {
  EXPECT_EQ(Open(4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Open(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagger
