// StagingPool: the bounded host memory snapshots are copied into. One
// mapping, cut into slabs of one chunk each, allocated and pre-faulted once
// (and pinned for CUDA through the snapshot source) and reused by every
// save. Nothing is allocated per save; when every slab is in use, Acquire
// waits for one to be released, so a state larger than the pool is
// snapshotted in pieces instead of running out of memory.
//
// A chunk of at most half a slab (a small tensor, a tensor's last chunk)
// takes a piece instead: the smallest power of two from 4 KiB that holds
// it, cut from a free slab when that size has none left. Pieces go back to
// their size's free list, not to whole slabs: the same sizes come back at
// every save. So a state of hundreds of small tensors needs about its own
// size in staging, not a slab per tensor.
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

// A rank's share of this host's memory, for each of the client's two
// large uses (staging, delta bases): an eighth of physical memory divided
// among the ranks on the host (LOCAL_WORLD_SIZE, as torchrun sets it; 1
// without), at least 64 MiB.
uint64_t HostMemoryShare();

class StagingPool {
 public:
  // Maps max(total_bytes, slab_bytes) rounded down to whole slabs, on
  // huge pages where the kernel gives them and not inherited by fork(),
  // and faults it all in now with `populate` (else the first copies into
  // each page do). A pool of one slab is mapped on small pages and never
  // faulted in ahead (FaultInNext is false): a small rank's pool costs
  // the pages its copies touch. RESOURCE_EXHAUSTED when the memory cannot
  // be mapped.
  static Result<std::unique_ptr<StagingPool>> Create(uint64_t total_bytes,
                                                     uint64_t slab_bytes,
                                                     bool populate = true);
  ~StagingPool();

  // A free slab, or piece for `len` bytes (default: a whole slab); blocks
  // while none is free. `*waited` (optional) is set true when it had to.
  char* Acquire(bool* waited = nullptr) { return Acquire(slab_bytes_, waited); }
  char* Acquire(uint64_t len, bool* waited);
  // As Acquire, or nullptr when nothing is free right now.
  char* TryAcquire() { return TryAcquire(slab_bytes_); }
  char* TryAcquire(uint64_t len);
  // Returns a slab or piece from Acquire().
  void Release(char* slab);
  // Makes every slab whole and free again (pieces cut by earlier saves
  // merged back) and forgets the peak: a pool handed to another user.
  // FAILED_PRECONDITION, changing nothing, while anything is acquired.
  Status Reset();
  // Faults in the next whole slab that is free and was not faulted in by
  // this call before (it is off the free list meanwhile); false when none
  // is left. For a pool made without `populate`, a slab at a time, so that
  // a save can start in between.
  bool FaultInNext();
  // The size of the slab or piece at `p` (from Acquire()).
  uint64_t SizeOf(const char* p) const;
  // The bytes Acquire(len) takes from the pool: a whole slab, or the
  // piece's size.
  uint64_t Footprint(uint64_t len) const { return Footprint(len, slab_bytes_); }
  static uint64_t Footprint(uint64_t len, uint64_t slab_bytes);

  char* base() const { return base_; }
  uint64_t size() const { return slabs_ * slab_bytes_; }
  uint64_t slab_bytes() const { return slab_bytes_; }
  uint64_t slabs() const { return slabs_; }
  // Bytes handed out now, and the most ever handed out at once.
  uint64_t in_use_bytes() const;
  uint64_t peak_bytes() const;

  // The default pool's cap: HostMemoryShare().
  static uint64_t DefaultBytes();

 private:
  StagingPool(char* base, uint64_t slabs, uint64_t slab_bytes);
  // The piece size class (log2) for `len`, or 0 for a whole slab.
  int ClassOf(uint64_t len) const;
  // A free slab or piece of class `c`, cutting a slab when needed; nullptr
  // when none.
  char* TakeLocked(int c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CanTakeLocked(int c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  char* const base_;
  const uint64_t slabs_;
  const uint64_t slab_bytes_;
  mutable absl::Mutex mu_;
  std::vector<char*> free_ ABSL_GUARDED_BY(mu_);  // whole slabs
  // Free pieces by class (log2 of their size, 12 .. 63).
  std::vector<char*> pieces_[64] ABSL_GUARDED_BY(mu_);
  // Per slab: the class it is cut into, 0 while whole.
  std::vector<uint8_t> cut_ ABSL_GUARDED_BY(mu_);
  uint64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;      // bytes handed out
  uint64_t next_fault_ ABSL_GUARDED_BY(mu_) = 0;  // FaultInNext's next slab
  uint64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_STAGING_POOL_H_
