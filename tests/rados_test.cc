// The durable tier against a real one-node Ceph cluster
// (scripts/ceph-cluster.sh, started once for this binary): steps drained to
// the pool load bit-exact from a new server on an empty --data, a damaged
// object is caught naming it, and a cluster stopped during the drain is
// caught up with once it is back while saves to the disk go on. Real
// processes throughout. Every test skips, saying why, where the cluster
// cannot start (no Ceph packages: scripts/install-deps.sh installs them).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cold_tier_util.h"
#include "gtest/gtest.h"
#include "metrics/http_exporter.h"
#include "stagger/checkpointer.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using testutil::Sample;

constexpr char kPool[] = "stagger";

// The cluster, shared by every test of the binary.
class Cluster : public ::testing::Environment {
 public:
  static Cluster* Get() { return instance_; }
  void SetUp() override {
    instance_ = this;
    dir_ = std::make_unique<testutil::TempDir>();
    // Stopped and removed by the script's watcher if this binary ends
    // without its TearDown (Ctrl-C, a crash).
    setenv("CEPH_CLUSTER_OWNER_PID", std::to_string(getpid()).c_str(), 1);
    const auto r = Script("start", {kPool, "2"});
    if (r.exit_code == 0) {
      conf_ = dir_->path() + "/ceph.conf";
    } else {
      skip_ = "the Ceph cluster did not start (scripts/ceph-cluster.sh exit " +
              std::to_string(r.exit_code) + "): " + r.out;
      std::fprintf(stderr, "rados_test: %s\n", skip_.c_str());
    }
  }
  void TearDown() override {
    if (dir_) Script("stop", {});
  }
  testutil::RunResult Script(const std::string& cmd,
                             std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        std::string(STAGGER_SOURCE_DIR) + "/scripts/ceph-cluster.sh", cmd,
        dir_->path()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return testutil::RunProcess(argv);
  }
  const std::string& conf() const { return conf_; }
  const std::string& skip() const { return skip_; }
  // Runs the rados CLI on the pool; its output.
  testutil::RunResult Rados(std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/rados", "-c", conf_, "-p",
                                     kPool};
    argv.insert(argv.end(), args.begin(), args.end());
    return testutil::RunProcess(argv);
  }

 private:
  static Cluster* instance_;
  std::unique_ptr<testutil::TempDir> dir_;
  std::string conf_, skip_;
};
Cluster* Cluster::instance_ = nullptr;

class RadosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Cluster::Get()->skip().empty()) GTEST_SKIP() << Cluster::Get()->skip();
  }

  std::unique_ptr<testutil::ServerProcess> StartServer(
      const std::string& data) {
    auto s = testutil::ServerProcess::Start(
        data, {"--rados-pool", kPool, "--ceph-conf", Cluster::Get()->conf(),
               "--metrics-listen", "127.0.0.1:0"});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::unique_ptr<Checkpointer> Open(const std::string& servers,
                                     const std::string& job) {
    return testutil::OpenJob(servers, job);
  }

  std::string WaitDrained(testutil::ServerProcess& s, double steps,
                          double timeout_s = 120) {
    return testutil::WaitDrained(s, steps, timeout_s);
  }

  // Saves `w` as step 1 of `job` on `s` and waits until it is drained.
  void SaveAndDrain(testutil::ServerProcess& s, const std::string& job,
                    std::vector<char>& w) {
    {
      auto ck = Open(s.grpc(), job);
      ASSERT_NE(ck, nullptr);
      ASSERT_TRUE(
          ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
      auto h = ck->Save(1);
      ASSERT_TRUE(h.ok() && h->Wait().ok());
    }
    WaitDrained(s, 1);
  }

  // Flips one bit of byte `at` of file `path`.
  static void FlipByte(const std::string& path, std::streamoff at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f) << path;
    char c = 0;
    f.seekg(at);
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(at);
    f.write(&c, 1);
  }

  testutil::TempDir dir_;
};

// Two steps (the second mostly unchanged, so stored as deltas and
// references) drained, the server and its disk gone; a new server on an
// empty --data lists both and loads each bit-exact.
TEST_F(RadosTest, DrainedStepsLoadBitExactFromANewServerWithAnEmptyDisk) {
  testutil::RoundTripThroughTheTier(
      [this](const std::string& data) { return StartServer(data); },
      dir_.path(), "roundtrip");
}

// A chunk object damaged in the pool (one payload byte flipped): a load
// through a server without its own copy fails with DATA_LOSS naming the
// object.
TEST_F(RadosTest, ADamagedObjectFailsTheLoadNamingIt) {
  auto a = StartServer(dir_.path() + "/a");
  ASSERT_NE(a, nullptr);
  std::vector<char> w(2 << 20);
  testutil::FillPattern(w, 3);
  ASSERT_NO_FATAL_FAILURE(SaveAndDrain(*a, "damaged", w));
  a->Stop(SIGTERM);
  auto listed = Cluster::Get()->Rados({"-N", "damaged", "ls"});
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(listed.out, m, std::regex("chunk\\.[0-9a-f]{32}")))
      << listed.out;
  const std::string object = m[0];
  const std::string file = dir_.path() + "/object";
  ASSERT_EQ(
      Cluster::Get()->Rados({"-N", "damaged", "get", object, file}).exit_code,
      0);
  FlipByte(file, 100);
  ASSERT_EQ(
      Cluster::Get()->Rados({"-N", "damaged", "put", object, file}).exit_code,
      0);
  auto fresh = StartServer(dir_.path() + "/fresh");
  ASSERT_NE(fresh, nullptr);
  testutil::ExpectDataLossNaming(*fresh, "damaged", w.size(), object);
}

// A flipped byte in the server's own copy (a segment file): the load is
// served from the pool's copy, bit-exact, and the bad copy is counted.
TEST_F(RadosTest, ADamagedDiskCopyIsReadFromThePool) {
  const std::string data = dir_.path() + "/a";
  auto a = StartServer(data);
  ASSERT_NE(a, nullptr);
  std::vector<char> w(2 << 20);
  testutil::FillPattern(w, 5);
  ASSERT_NO_FATAL_FAILURE(SaveAndDrain(*a, "diskrot", w));
  a->Stop(SIGTERM);
  std::string seg;
  for (auto& e : std::filesystem::recursive_directory_iterator(data)) {
    if (e.is_regular_file() && e.path().extension() == ".seg") {
      if (seg.empty() || e.path().string() < seg) seg = e.path().string();
    }
  }
  ASSERT_FALSE(seg.empty());
  FlipByte(seg, 64 + 1000);  // the first record's payload
  a = StartServer(data);
  ASSERT_NE(a, nullptr);
  auto ck = Open(a->grpc(), "diskrot");
  ASSERT_NE(ck, nullptr);
  std::vector<char> out(w.size(), 0);
  ASSERT_TRUE(
      ck->Register({"w", "U8", {int64_t(out.size())}, out.data()}).ok());
  auto loaded = ck->Load(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(out == w);
  auto page = metrics::HttpGet(a->metrics(), "/metrics");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(Sample(*page, "stagger_server_verify_failures_total"), 1) << *page;
}

// A job placed on two servers (chunks on each, manifests on one): each
// drains its own chunks, the coordinator writes the step once all are in
// the pool, and a new server loads it bit-exact from the pool alone.
TEST_F(RadosTest, TwoServersOfOneJobEachDrainTheirChunks) {
  auto a = StartServer(dir_.path() + "/a");
  auto b = StartServer(dir_.path() + "/b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<char> w(16 << 20);
  testutil::FillPattern(w, 9);
  {
    auto ck = Open(a->grpc() + "," + b->grpc(), "spread");
    ASSERT_NE(ck, nullptr);
    ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    auto h = ck->Save(1);
    ASSERT_TRUE(h.ok() && h->Wait().ok());
  }
  // Both hold chunks of it (16 chunks placed by rendezvous hashing).
  bool in_pool = false;
  for (int i = 0; i < 1200 && !in_pool; ++i) {
    in_pool = Cluster::Get()
                  ->Rados({"-N", "spread", "stat", "step.00000000000000000001"})
                  .exit_code == 0;
    if (!in_pool) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(in_pool) << "step 1 never reached the pool";
  double written[2];
  int k = 0;
  for (auto* s : {a.get(), b.get()}) {
    auto page = metrics::HttpGet(s->metrics(), "/metrics");
    ASSERT_TRUE(page.ok());
    written[k++] = Sample(*page, "stagger_server_drain_chunks_total");
  }
  EXPECT_GT(written[0], 0);
  EXPECT_GT(written[1], 0);
  EXPECT_EQ(written[0] + written[1], 16);
  a->Stop(SIGTERM);
  b->Stop(SIGTERM);
  auto fresh = StartServer(dir_.path() + "/fresh");
  ASSERT_NE(fresh, nullptr);
  testutil::ExpectLoads(*fresh, "spread", 1, w);
}

// The cluster stops while steps wait to be drained: saves to the server's
// disk go on, the metrics say the tier is behind, and once the cluster is
// back the drain catches up. Last in the file: it stops the shared cluster.
TEST_F(RadosTest, CephStoppedMidDrainIsCaughtUpWithWhenBack) {
  auto a = StartServer(dir_.path() + "/a");
  ASSERT_NE(a, nullptr);
  auto ck = Open(a->grpc(), "outage");
  ASSERT_NE(ck, nullptr);
  std::vector<char> w(4 << 20);
  ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
  testutil::FillPattern(w, 4);
  auto h = ck->Save(1);
  ASSERT_TRUE(h.ok() && h->Wait().ok());
  WaitDrained(*a, 1);
  ASSERT_EQ(Cluster::Get()->Script("stop", {}).exit_code, 0);
  for (int64_t step = 2; step <= 3; ++step) {
    testutil::FillPattern(w, 4 + step);
    auto hs = ck->Save(step);
    ASSERT_TRUE(hs.ok()) << hs.status();
    ASSERT_TRUE(hs->Wait().ok()) << hs->Wait();  // the disk takes it
  }
  // The drain reports the outage.
  std::string page;
  for (int i = 0; i < 300; ++i) {
    auto got = metrics::HttpGet(a->metrics(), "/metrics");
    if (got.ok() && Sample(*got, "stagger_server_drain_up") == 0 &&
        Sample(*got, "stagger_server_drain_steps_behind") == 2) {
      page = *got;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Sample(page, "stagger_server_drain_steps_behind"), 2) << page;
  EXPECT_GE(Sample(page, "stagger_server_drain_failed_passes_total"), 1);
  const auto restart = Cluster::Get()->Script("restart", {kPool});
  ASSERT_EQ(restart.exit_code, 0) << restart.out;
  WaitDrained(*a, 3);
  const auto listed = Cluster::Get()->Rados({"-N", "outage", "ls"});
  for (const char* step :
       {"step.00000000000000000001", "step.00000000000000000002",
        "step.00000000000000000003"}) {
    EXPECT_NE(listed.out.find(step), std::string::npos) << listed.out;
  }
}

}  // namespace
}  // namespace stagger

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new stagger::Cluster);
  return RUN_ALL_TESTS();
}
