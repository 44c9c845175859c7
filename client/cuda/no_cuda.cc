// The CUDA snapshot source in a build without CUDA: no device is ever
// available and creating a source says why.
#include "client/cuda/cuda_snapshot.h"

namespace stagger::client {

bool CudaDeviceAvailable() { return false; }

Result<std::unique_ptr<SnapshotSource>> NewCudaSnapshotSource(
    const CudaSnapshotOptions&) {
  return absl::UnimplementedError("this build has no CUDA support");
}

}  // namespace stagger::client
