#include "client/cuda/internal/chunk_hash.h"

namespace stagger::client_internal {
namespace {

__device__ __forceinline__ unsigned long long Mix(unsigned long long x) {
  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Every thread folds a strided share of the words; each word's two mixes
// depend on its position, so moving bytes changes the result. The block's
// partial results are XORed together and into out[0..1].
// Chunk blockIdx.y of a run: `chunk` bytes each from `base`, the last one
// shorter when `total` says so.
__global__ void ChunkHashKernel(const unsigned char* base, size_t total,
                                size_t chunk, unsigned long long* results) {
  const size_t first = static_cast<size_t>(blockIdx.y) * chunk;
  const unsigned char* src = base + first;
  const size_t len = total - first < chunk ? total - first : chunk;
  unsigned long long* out = results + 2 * blockIdx.y;
  unsigned long long h1 = 0, h2 = 0;
  const size_t words = len / 8;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const bool aligned = (reinterpret_cast<uintptr_t>(src) & 7) == 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < words; i += stride) {
    unsigned long long w;
    if (aligned) {
      w = reinterpret_cast<const unsigned long long*>(src)[i];
    } else {
      w = 0;
      for (int b = 0; b < 8; ++b) {
        w |= static_cast<unsigned long long>(src[i * 8 + b]) << (8 * b);
      }
    }
    h1 ^= Mix(w ^ (i * 0x9e3779b97f4a7c15ull));
    h2 ^= Mix(w + (i + 1) * 0xc2b2ae3d27d4eb4full + 0x165667b19e3779f9ull);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long tail = len;  // the length is part of the fingerprint
    for (size_t b = words * 8; b < len; ++b) {
      tail = tail * 0x100000001b3ull ^ src[b];
    }
    h1 ^= Mix(tail ^ 0x5bd1e9955bd1e995ull);
    h2 ^= Mix(tail + 0x27d4eb2f165667c5ull);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    h1 ^= __shfl_xor_sync(0xffffffffu, h1, offset);
    h2 ^= __shfl_xor_sync(0xffffffffu, h2, offset);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicXor(&out[0], h1);
    atomicXor(&out[1], h2);
  }
}

}  // namespace

cudaError_t LaunchChunkHash(const void* src, size_t len,
                            unsigned long long* out, cudaStream_t stream) {
  return LaunchChunkHashes(src, len, len > 0 ? len : 1, out, stream);
}

cudaError_t LaunchChunkHashes(const void* base, size_t total, size_t chunk,
                              unsigned long long* out, cudaStream_t stream) {
  constexpr int kThreads = 256;
  constexpr size_t kMaxChunksPerLaunch = 65535;  // grid.y limit
  size_t chunks = total == 0 ? 1 : (total + chunk - 1) / chunk;
  size_t words = chunk / 8;
  // Enough blocks per chunk to fill the GPU when there are few chunks.
  unsigned bx =
      static_cast<unsigned>((words + kThreads * 32 - 1) / (kThreads * 32));
  if (bx < 1) bx = 1;
  if (bx > 64) bx = 64;
  const unsigned char* p = static_cast<const unsigned char*>(base);
  for (size_t done = 0; done < chunks; done += kMaxChunksPerLaunch) {
    size_t n = chunks - done < kMaxChunksPerLaunch ? chunks - done
                                                   : kMaxChunksPerLaunch;
    dim3 grid(bx, static_cast<unsigned>(n));
    ChunkHashKernel<<<grid, kThreads, 0, stream>>>(
        p + done * chunk, total - done * chunk, chunk, out + 2 * done);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace stagger::client_internal
