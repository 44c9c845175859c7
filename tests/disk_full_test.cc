// A server whose disk fills up: the save that hits ENOSPC fails with
// RESOURCE_EXHAUSTED naming the server and the space left, the previous
// step stays latest and restores bit-exactly, the server keeps serving,
// and once space is freed saves succeed again.
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

TEST(DiskFullTest, FullDiskFailsTheSaveAndLosesNothingAcknowledged) {
  testutil::TempDir dir;
  auto disk = testutil::FaultyDisk::Make(dir.path());
  ASSERT_TRUE(disk.ok()) << disk.status();
  server::FaultInjectionFileSystem& fs = (*disk)->fs();
  auto srv = server::Server::Start((*disk)->options());
  ASSERT_TRUE(srv.ok()) << srv.status();

  constexpr size_t kBytes = 6 << 20;
  std::vector<char> w(kBytes);
  testutil::FillPattern(w, 1);
  const std::vector<char> step1 = w;
  CheckpointerOptions o;
  o.servers = (*srv)->grpc_address();
  o.job = "full";
  o.codec = CodecChoice::kRaw;
  o.chunk_size = 1 << 20;
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE((*ck)->Register({"w", "U8", {int64_t(kBytes)}, w.data()}).ok());
  auto h1 = (*ck)->Save(1);
  ASSERT_TRUE(h1.ok());
  ASSERT_TRUE(h1->Wait().ok()) << h1->Wait();

  // The disk fills: room for about two of step 2's six changed chunks.
  testutil::FillPattern(w, 2);
  fs.SetNoSpaceAfter(2 << 20);
  auto h2 = (*ck)->Save(2);
  ASSERT_TRUE(h2.ok());
  Status failed = h2->Wait();
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
  const std::string msg(failed.message());
  EXPECT_NE(msg.find("disk full"), std::string::npos) << msg;
  EXPECT_NE(msg.find((*srv)->data_address()), std::string::npos) << msg;
  EXPECT_NE(msg.find("bytes free of"), std::string::npos) << msg;

  // Step 1 is still the latest complete step, and restores bit-exactly.
  auto steps = (*ck)->Steps(/*include_partial=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].step, 1);
  std::fill(w.begin(), w.end(), 0);
  auto loaded = (*ck)->Load(kLatestStep);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, 1);
  EXPECT_EQ(w, step1);

  // Space comes back: the server accepts saves again.
  fs.ClearNoSpace();
  testutil::FillPattern(w, 3);
  const std::vector<char> step3 = w;
  auto h3 = (*ck)->Save(3);
  ASSERT_TRUE(h3.ok());
  ASSERT_TRUE(h3->Wait().ok()) << h3->Wait();
  std::fill(w.begin(), w.end(), 0);
  loaded = (*ck)->Load(kLatestStep);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, 3);
  EXPECT_EQ(w, step3);
  ck->reset();
  (*srv)->Shutdown();
}

}  // namespace
}  // namespace stagger
