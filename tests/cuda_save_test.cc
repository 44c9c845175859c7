// Saving CUDA tensors through the SDK: the snapshot holds the values at
// Save() (ordered after the caller's stream), whatever the training loop
// writes afterwards. Runs where a CUDA device is present; skips otherwise.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "stagger/checkpointer.h"
#include "tests/testutil/pattern.h"
#include "tests/testutil/process.h"

namespace stagger {
namespace {

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

class CudaSaveTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!HaveDevice()) GTEST_SKIP() << "no CUDA device: CUDA save test skipped";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::unique_ptr<Checkpointer> Open() {
    CheckpointerOptions o;
    o.servers = "embedded:" + dir_.path();
    o.job = "cuda";
    o.chunk_size = 1 << 20;
    o.device_snapshot = GetParam();
    auto ck = Checkpointer::Open(o);
    EXPECT_TRUE(ck.ok()) << ck.status();
    return ck.ok() ? std::move(*ck) : nullptr;
  }
  testutil::TempDir dir_;
  cudaStream_t stream_ = nullptr;
};

TEST_P(CudaSaveTest, SnapshotSeesQueuedWorkAndNotLaterWrites) {
  const size_t n = (6 << 20) + 4096;
  std::vector<char> pattern(n), zeros(n, 0);
  testutil::FillPattern(pattern, 42);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n), cudaSuccess);
  // Queued on the caller's stream right before Save(): must be captured.
  ASSERT_EQ(
      cudaMemcpyAsync(dev, pattern.data(), n, cudaMemcpyHostToDevice, stream_),
      cudaSuccess);
  auto ck = Open();
  ASSERT_NE(ck, nullptr);
  TensorSpec t{"w", "U8", {int64_t(n)}, dev, Device::kCuda, 0};
  ASSERT_TRUE(ck->Register(t).ok());
  SaveOptions so;
  so.cuda_stream = stream_;
  auto h = ck->Save(1, so);
  ASSERT_TRUE(h.ok()) << h.status();
  // The next optimizer step, on the same stream, right after Save returns.
  ASSERT_EQ(cudaMemsetAsync(dev, 0x77, n, stream_), cudaSuccess);
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_EQ(h->stats().bytes_raw, n);

  // Load into host memory and into the device tensor itself.
  std::vector<char> host(n, 0);
  ck->ClearRegistrations();
  ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(n)}, host.data()}).ok());
  ASSERT_TRUE(ck->Load(1).ok());
  EXPECT_TRUE(host == pattern);
  ck->ClearRegistrations();
  ASSERT_TRUE(ck->Register(t).ok());
  ASSERT_TRUE(ck->Load(1).ok());
  std::vector<char> back(n, 0);
  ASSERT_EQ(cudaMemcpy(back.data(), dev, n, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(back == pattern);
  cudaFree(dev);
}

TEST_P(CudaSaveTest, LazySaveCapturesBeforeBeforeUpdateReturns) {
  const size_t n = 9 << 20;
  std::vector<char> pattern(n);
  testutil::FillPattern(pattern, 7);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, pattern.data(), n, cudaMemcpyHostToDevice),
            cudaSuccess);
  auto ck = Open();
  ASSERT_NE(ck, nullptr);
  ASSERT_TRUE(
      ck->Register({"w", "U8", {int64_t(n)}, dev, Device::kCuda, 0}).ok());
  SaveOptions so;
  so.lazy = true;
  so.cuda_stream = stream_;
  auto h = ck->Save(2, so);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(ck->BeforeUpdate().ok());
  ASSERT_EQ(cudaMemsetAsync(dev, 0, n, stream_), cudaSuccess);
  ASSERT_TRUE(h->Wait().ok());
  std::vector<char> host(n, 1);
  ck->ClearRegistrations();
  ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(n)}, host.data()}).ok());
  ASSERT_TRUE(ck->Load(2).ok());
  EXPECT_TRUE(host == pattern);
  cudaFree(dev);
}

TEST_P(CudaSaveTest, UnchangedDeviceChunksAreNotCopied) {
  const size_t chunk = 1 << 20, n = 8 * chunk;
  std::vector<char> pattern(n);
  testutil::FillPattern(pattern, 77);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, pattern.data(), n, cudaMemcpyHostToDevice),
            cudaSuccess);
  auto ck = Open();
  ASSERT_NE(ck, nullptr);
  TensorSpec t{"w", "U8", {int64_t(n)}, dev, Device::kCuda, 0};
  ASSERT_TRUE(ck->Register(t).ok());
  SaveOptions so;
  so.cuda_stream = stream_;
  auto h1 = ck->Save(1, so);
  ASSERT_TRUE(h1.ok() && h1->Wait().ok());
  EXPECT_EQ(h1->stats().bytes_snapshotted, n);
  // Chunk 5 changes on the device, queued before the next save.
  ASSERT_EQ(cudaMemsetAsync(static_cast<char*>(dev) + 5 * chunk + 100, 0x11, 10,
                            stream_),
            cudaSuccess);
  std::vector<char> step2 = pattern;
  std::memset(step2.data() + 5 * chunk + 100, 0x11, 10);
  auto h2 = ck->Save(2, so);
  ASSERT_TRUE(h2.ok() && h2->Wait().ok());
  EXPECT_EQ(h2->stats().chunks_unchanged, 7u);
  EXPECT_EQ(h2->stats().bytes_snapshotted, chunk);  // only the changed one
  std::vector<char> host(n, 0);
  ck->ClearRegistrations();
  ASSERT_TRUE(ck->Register({"w", "U8", {int64_t(n)}, host.data()}).ok());
  ASSERT_TRUE(ck->Load(2).ok());
  EXPECT_TRUE(host == step2);
  ASSERT_TRUE(ck->Load(1).ok());
  EXPECT_TRUE(host == pattern);
  cudaFree(dev);
}

TEST(CudaSaveWithoutDeviceTest, RegisteringACudaTensorSaysWhy) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  testutil::TempDir dir;
  CheckpointerOptions o;
  o.servers = "embedded:" + dir.path();
  o.job = "nodev";
  auto ck = Checkpointer::Open(o);
  ASSERT_TRUE(ck.ok()) << ck.status();
  int fake = 0;
  Status s = (*ck)->Register({"w", "U8", {4}, &fake, Device::kCuda, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("tensor 'w' on cuda:0"), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaSaveTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "DeviceSnapshot" : "DirectD2H";
                         });

}  // namespace
}  // namespace stagger
