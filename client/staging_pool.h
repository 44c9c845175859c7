// StagingPool: the bounded host memory snapshots are copied into. One
// mapping, cut into slabs of one chunk each, allocated and pre-faulted once
// (and pinned for CUDA through the snapshot source) and reused by every
// save. Nothing is allocated per save; when every slab is in use, Acquire
// waits for one to be released, so a state larger than the pool is
// snapshotted in pieces instead of running out of memory.
//
// Thread-safety: all methods are thread-safe.
#ifndef STAGGER_CLIENT_STAGING_POOL_H_
#define STAGGER_CLIENT_STAGING_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "stagger/status.h"

namespace stagger::client {

class StagingPool {
 public:
  // Maps max(total_bytes, slab_bytes) rounded down to whole slabs.
  // RESOURCE_EXHAUSTED when the memory cannot be mapped.
  static Result<std::unique_ptr<StagingPool>> Create(uint64_t total_bytes,
                                                     uint64_t slab_bytes);
  ~StagingPool();

  // A free slab; blocks while none is free. `*waited` (optional) is set
  // true when it had to wait.
  char* Acquire(bool* waited = nullptr);
  // A free slab, or nullptr when none is free right now.
  char* TryAcquire();
  // Returns a slab from Acquire().
  void Release(char* slab);

  char* base() const { return base_; }
  uint64_t size() const { return slabs_ * slab_bytes_; }
  uint64_t slab_bytes() const { return slab_bytes_; }
  uint64_t slabs() const { return slabs_; }
  // Bytes handed out now, and the most ever handed out at once.
  uint64_t in_use_bytes() const;
  uint64_t peak_bytes() const;

  // Default pool size: min(1 GiB, physical memory / 16).
  static uint64_t DefaultBytes();

 private:
  StagingPool(char* base, uint64_t slabs, uint64_t slab_bytes);
  char* const base_;
  const uint64_t slabs_;
  const uint64_t slab_bytes_;
  mutable absl::Mutex mu_;
  std::vector<char*> free_ ABSL_GUARDED_BY(mu_);
  uint64_t peak_slabs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_STAGING_POOL_H_
