// 100 crash points: a server whose segment writes go through the
// fault-injecting file system "dies" after a random number of write
// requests (later writes, syncs and creations fail), in the middle of a
// run of saves; then everything not fdatasynced is dropped (whole, or a
// random torn tail), the server restarts on the same directory, and the
// newest complete step must be exactly the last save that was
// acknowledged, and load bit-exactly. The chunk index and manifests
// (RocksDB) are not on the injected file system: they are synced on every
// commit, which is what this exercises the segments against.
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/server.h"
#include "server/storage/fault_injection_file_system.h"
#include "stagger/checkpointer.h"
#include "testutil/faulty_disk.h"
#include "testutil/pattern.h"
#include "testutil/process.h"

namespace stagger {
namespace {

using CrashMode = server::FaultInjectionFileSystem::CrashMode;

TEST(CrashPointsTest, NoCompleteStepEverLosesAByte) {
  std::mt19937 rng(31);
  int crashed_mid_run = 0;
  for (int point = 0; point < 100; ++point) {
    SCOPED_TRACE(testing::Message() << "crash point " << point);
    testutil::TempDir dir;
    auto disk = testutil::FaultyDisk::Make(dir.path());
    ASSERT_TRUE(disk.ok()) << disk.status();
    server::FaultInjectionFileSystem& fs = (*disk)->fs();
    const server::ServerOptions& so = (*disk)->options();
    std::vector<char> w(512 << 10);
    CheckpointerOptions o;
    o.job = "crash";
    o.chunk_size = 64 << 10;  // 8 chunks: several write requests per save
    o.codec = CodecChoice::kRaw;
    o.rpc_timeout_s = 10;
    int64_t acknowledged = 0;
    {
      auto srv = server::Server::Start(so);
      ASSERT_TRUE(srv.ok()) << srv.status();
      o.servers = (*srv)->grpc_address();
      auto ck = Checkpointer::Open(o);
      ASSERT_TRUE(ck.ok()) << ck.status();
      ASSERT_TRUE(
          (*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
      fs.CrashAfterWrites(1 + rng() % 40);
      for (int64_t step = 1; step <= 6; ++step) {
        testutil::FillPattern(w, testutil::WeightSeed(0, step));
        auto h = (*ck)->Save(step);
        ASSERT_TRUE(h.ok()) << h.status();
        if (!h->Wait().ok()) break;
        acknowledged = step;
      }
    }
    if (acknowledged < 6) ++crashed_mid_run;
    const CrashMode mode =
        point % 2 ? CrashMode::kTornTail : CrashMode::kDropAll;
    ASSERT_TRUE(fs.DropUnsyncedData(mode, rng()).ok());

    auto srv = server::Server::Start(so);
    ASSERT_TRUE(srv.ok()) << srv.status();
    o.servers = (*srv)->grpc_address();
    auto ck = Checkpointer::Open(o);
    ASSERT_TRUE(ck.ok()) << ck.status();
    std::fill(w.begin(), w.end(), 0);
    ASSERT_TRUE(
        (*ck)->Register({"w", "U8", {int64_t(w.size())}, w.data()}).ok());
    auto got = (*ck)->Load(kLatestStep);
    if (acknowledged == 0) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound)
          << got.status();
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, acknowledged);
    std::vector<char> want(w.size());
    testutil::FillPattern(want, testutil::WeightSeed(0, acknowledged));
    EXPECT_TRUE(w == want) << "step " << acknowledged << " differs";
  }
  // The crash points fall inside the runs of saves, not after them.
  EXPECT_GE(crashed_mid_run, 90);
}

}  // namespace
}  // namespace stagger
