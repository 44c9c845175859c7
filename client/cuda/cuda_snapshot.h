// CUDA snapshot source: copies CUDA device memory into host staging with
// cudaMemcpyAsync on a dedicated low-priority stream of its own, ordered
// after an event recorded on the caller's stream (see snapshot_source.h for
// the contract every SnapshotSource keeps).
//
// Optionally (device_snapshot) a chunk is first copied device-to-device into
// a staging ring in spare device memory: it is *captured* when that copy
// completes and drained to host afterwards, so the training loop waits only
// for the HBM copy. A chunk that does not fit the ring's free space goes
// straight to host; the ring never makes a save fail for lack of memory.
//
// In a build without CUDA (STAGGER_HAVE_CUDA undefined) the same functions
// exist: CudaDeviceAvailable() is false and NewCudaSnapshotSource() returns
// UNIMPLEMENTED.
//
// Fence(caller_stream): `caller_stream` must be a stream of this source's
// device; nullptr is that device's legacy default stream. A stream of
// another device fails (INTERNAL, invalid resource handle).
//
// Thread-safety: as SnapshotSource; in addition Fence, Copy, stats() and the
// staging calls may be called from several threads at once (several saves
// in flight). Callbacks run on the source's completion threads, never on
// the caller's, and never with a lock of the source held.
#ifndef STAGGER_CLIENT_CUDA_CUDA_SNAPSHOT_H_
#define STAGGER_CLIENT_CUDA_CUDA_SNAPSHOT_H_

#include <cstdint>
#include <memory>

#include "client/snapshot_source.h"
#include "stagger/status.h"

namespace stagger::client {

// True when this build has CUDA and the runtime sees at least one device.
bool CudaDeviceAvailable();

struct CudaSnapshotOptions {
  int device = 0;  // CUDA device ordinal the source's tensors live on
  // Capture by a device-to-device copy into a device staging ring first.
  bool device_snapshot = false;
  // Size of that ring. 0 = auto: min(free device memory / 4, 4 GiB). A size
  // larger than the free device memory turns the device snapshot off.
  uint64_t device_staging_bytes = 0;
};

// Counters of one source, for tests and benchmarks.
struct CudaSnapshotStats {
  uint64_t device_ring_bytes = 0;  // 0 when there is no device ring
  uint64_t chunks_via_device = 0;  // captured by a device-to-device copy
  uint64_t chunks_direct = 0;      // copied straight to host
  uint64_t bytes_via_device = 0;
  uint64_t bytes_direct = 0;
};

// What NewCudaSnapshotSource returns (reach it with dynamic_cast).
class CudaSnapshotSource : public SnapshotSource {
 public:
  virtual CudaSnapshotStats stats() const = 0;
};

// A source for device `options.device`. The destructor waits for every copy
// in flight and runs its callbacks before it returns, and unregisters any
// staging still registered.
//
// Errors: UNAVAILABLE when the runtime sees no device (the message carries
// the runtime's reason); INVALID_ARGUMENT for a device ordinal out of range;
// INTERNAL/UNAVAILABLE naming the failed CUDA call otherwise; UNIMPLEMENTED
// in a build without CUDA.
//
// Copy errors (a bad source pointer, a faulted device) reach both callbacks
// as INTERNAL or UNAVAILABLE with the CUDA error text. RegisterStaging
// returns the cudaHostRegister error (callers may go on unpinned; copies
// into pageable memory are correct but block the caller while they run);
// registering memory that is already registered is OK and leaves it to its
// owner.
Result<std::unique_ptr<SnapshotSource>> NewCudaSnapshotSource(
    const CudaSnapshotOptions& options);

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_CUDA_CUDA_SNAPSHOT_H_
