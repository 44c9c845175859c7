// The on-device chunk fingerprint: equal bytes give equal fingerprints
// wherever they sit, and any change gives a different one.
#include "client/cuda/internal/chunk_hash.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

namespace stagger::client_internal {
namespace {

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::array<unsigned long long, 2> Hash(const void* dev, size_t len) {
  unsigned long long* out = nullptr;
  std::array<unsigned long long, 2> h = {0, 0};
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), sizeof h), cudaSuccess);
  EXPECT_EQ(cudaMemset(out, 0, sizeof h), cudaSuccess);
  EXPECT_EQ(LaunchChunkHash(dev, len, out, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), out, sizeof h, cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(out);
  return h;
}

TEST(ChunkHashTest, SameBytesSameFingerprintAnyChangeDiffers) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device: chunk hash test skipped";
  const size_t n = (4 << 20) + 5;
  std::vector<unsigned char> host(n);
  std::mt19937 rng(3);
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  char* a = nullptr;
  char* b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n + 8), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  // The same bytes at an unaligned address take the byte-wise path.
  ASSERT_EQ(cudaMemcpy(b + 3, host.data(), n, cudaMemcpyHostToDevice),
            cudaSuccess);
  auto ha = Hash(a, n);
  EXPECT_EQ(ha, Hash(a, n));
  EXPECT_EQ(ha, Hash(b + 3, n));
  EXPECT_NE(ha, Hash(a, n - 1));  // length matters
  for (size_t pos : {size_t{0}, size_t{4096}, n - 1}) {
    unsigned char flipped = host[pos] ^ 0x01;
    ASSERT_EQ(cudaMemcpy(a + pos, &flipped, 1, cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_NE(ha, Hash(a, n)) << pos;
    ASSERT_EQ(cudaMemcpy(a + pos, &host[pos], 1, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  EXPECT_EQ(ha, Hash(a, n));
  // Swapping two words changes it (positions are mixed in).
  std::vector<unsigned char> swapped = host;
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);
  ASSERT_EQ(cudaMemcpy(a, swapped.data(), n, cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_NE(ha, Hash(a, n));
  cudaFree(a);
  cudaFree(b);
}

TEST(ChunkHashTest, BatchedLaunchMatchesOneChunkAtATime) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device: chunk hash test skipped";
  const size_t chunk = 1 << 20, total = 5 * chunk + 12345;
  std::vector<unsigned char> host(total);
  std::mt19937 rng(8);
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  char* dev = nullptr;
  unsigned long long* out = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, total), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), total, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), 12 * 8), cudaSuccess);
  ASSERT_EQ(cudaMemset(out, 0, 12 * 8), cudaSuccess);
  ASSERT_EQ(LaunchChunkHashes(dev, total, chunk, out, nullptr), cudaSuccess);
  std::vector<unsigned long long> batched(12);
  ASSERT_EQ(cudaMemcpy(batched.data(), out, 12 * 8, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (size_t i = 0; i < 6; ++i) {
    size_t len = i < 5 ? chunk : 12345;
    auto one = Hash(dev + i * chunk, len);
    EXPECT_EQ(batched[2 * i], one[0]) << i;
    EXPECT_EQ(batched[2 * i + 1], one[1]) << i;
  }
  cudaFree(out);
  cudaFree(dev);
}

}  // namespace
}  // namespace stagger::client_internal
