// A 128-bit fingerprint of device memory computed on the GPU, to find the
// chunks that changed since the last save without copying them out. Not
// cryptographic: two 64-bit position-dependent mixes of every 8-byte word,
// combined by XOR. Host-callable; the kernel lives in chunk_hash.cu.
#ifndef STAGGER_CLIENT_CUDA_INTERNAL_CHUNK_HASH_H_
#define STAGGER_CLIENT_CUDA_INTERNAL_CHUNK_HASH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace stagger::client_internal {

// Enqueues on `stream` the fingerprint of `len` bytes at device address
// `src`, XORed into out[0..1] (device memory the caller zeroed before, on
// the same stream). Returns the launch error, if any.
cudaError_t LaunchChunkHash(const void* src, size_t len,
                            unsigned long long* out, cudaStream_t stream);

// The fingerprints of `total` bytes at `base` cut into chunks of `chunk`
// bytes (the last one shorter), chunk i XORed into out[2i..2i+1] (zeroed by
// the caller), in as few launches as the grid allows.
cudaError_t LaunchChunkHashes(const void* base, size_t total, size_t chunk,
                              unsigned long long* out, cudaStream_t stream);

}  // namespace stagger::client_internal

#endif  // STAGGER_CLIENT_CUDA_INTERNAL_CHUNK_HASH_H_
