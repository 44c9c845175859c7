// Synchronous host-to-device copy for loading into CUDA tensors.
#ifndef STAGGER_CLIENT_CUDA_CUDA_COPY_H_
#define STAGGER_CLIENT_CUDA_CUDA_COPY_H_

#include <cstddef>

#include "stagger/status.h"

namespace stagger::client {

// Copies `len` host bytes at `src` to device memory `dst` on `device` and
// waits for the copy. INTERNAL naming the CUDA error on failure;
// UNIMPLEMENTED in a build without CUDA.
Status CudaCopyToDevice(int device, void* dst, const void* src, size_t len);

// The device ordinal that owns device pointer `ptr`; INVALID_ARGUMENT when
// it is not CUDA device memory, UNIMPLEMENTED without CUDA.
Result<int> CudaPointerDevice(const void* ptr);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CUDA_CUDA_COPY_H_
