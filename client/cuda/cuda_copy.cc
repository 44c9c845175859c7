#include "client/cuda/cuda_copy.h"

#include "absl/strings/str_cat.h"

#ifdef STAGGER_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace stagger::client {

Status CudaCopyToDevice(int device, void* dst, const void* src, size_t len) {
#ifdef STAGGER_HAVE_CUDA
  int previous = 0;
  cudaError_t e = cudaGetDevice(&previous);
  if (e == cudaSuccess) e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaMemcpy(dst, src, len, cudaMemcpyHostToDevice);
  cudaSetDevice(previous);  // leave the caller's current device as it was
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("copy of ", len,
                                            " bytes to cuda:", device, ": ",
                                            cudaGetErrorString(e)));
  }
  return absl::OkStatus();
#else
  return absl::UnimplementedError("this build has no CUDA support");
#endif
}

Result<int> CudaPointerDevice(const void* ptr) {
#ifdef STAGGER_HAVE_CUDA
  cudaPointerAttributes attr;
  cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess || attr.type != cudaMemoryTypeDevice) {
    cudaGetLastError();  // clear the sticky-free error state
    return absl::InvalidArgumentError(
        "pointer is not CUDA device memory (__cuda_array_interface__ data)");
  }
  return attr.device;
#else
  return absl::UnimplementedError("this build has no CUDA support");
#endif
}

}  // namespace stagger::client
