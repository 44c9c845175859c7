// SnapshotSource: copies a registered tensor's bytes into host staging
// memory. One implementation per kind of memory: host (memcpy on worker
// threads, client/host_snapshot.h) and CUDA (cudaMemcpyAsync on a dedicated
// stream, client/cuda/cuda_snapshot.h).
//
// A save calls Fence() once on the training thread, then Copy() for every
// chunk. Two moments matter per copy: when the source has been *captured*
// (the training loop may modify it from then on) and when the bytes are in
// the host destination (they may be encoded and shipped). For host memory
// they coincide; with a device-side snapshot the capture is the device-to-
// device copy and the host copy follows later.
//
// Thread-safety: Fence and Copy are called from one thread per save;
// callbacks run on the source's own threads and must not block for long.
#ifndef STAGGER_CLIENT_SNAPSHOT_SOURCE_H_
#define STAGGER_CLIENT_SNAPSHOT_SOURCE_H_

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "stagger/status.h"

namespace stagger::client {

using CopyCallback = std::function<void(const Status&)>;

class SnapshotSource {
 public:
  virtual ~SnapshotSource() = default;

  // Orders every later Copy() after the work the caller has already queued:
  // for CUDA, records an event on `caller_stream` (a cudaStream_t; nullptr
  // is the legacy default stream) that the copy stream waits on. Called on
  // the caller's thread at Save().
  virtual Status Fence(void* caller_stream) = 0;

  // Copies `len` bytes from `src` (memory of this source's kind) to `dst`
  // (host staging memory). `captured` runs once the source bytes have been
  // read or copied aside, `on_host` once they are in `dst`; each exactly
  // once, `captured` first, both with the same error if the copy failed.
  virtual void Copy(char* dst, const char* src, size_t len,
                    CopyCallback captured, CopyCallback on_host) = 0;

  // Fingerprints each {src, len} chunk where it lives, without copying it
  // out, ordered after the last Fence() like Copy(); `out` gets two 64-bit
  // words per chunk. A chunk whose fingerprint matches the previous save's
  // need not be copied at all. UNIMPLEMENTED when the source cannot (host
  // memory: copying is as cheap as hashing).
  virtual Status Fingerprint(
      const std::vector<std::pair<const char*, size_t>>& chunks,
      std::vector<uint64_t>* out) {
    return absl::UnimplementedError("no device fingerprints for this source");
  }

  // Memory of this kind that `dst` buffers live in can be registered so
  // copies into it are fast (pinned memory for CUDA). OK when there is
  // nothing to do.
  virtual Status RegisterStaging(void* base, size_t len) = 0;
  virtual void UnregisterStaging(void* base) = 0;
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_SNAPSHOT_SOURCE_H_
