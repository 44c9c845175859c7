// The host memory a Checkpointer holds: its staging pool (Staging) and the
// budget for the previous versions of chunks kept as delta bases.
//
// Thread-safety: Staging is used by the thread calling Save() (and
// CudaSource()); not thread-safe on its own.
#ifndef STAGGER_CLIENT_MEMORY_H_
#define STAGGER_CLIENT_MEMORY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/snapshot_source.h"
#include "client/staging_pool.h"
#include "stagger/options.h"
#include "stagger/status.h"

namespace stagger::client {

// CheckpointerOptions::delta_memory_bytes, 0 resolved: an eighth of the
// host's memory shared among the ranks on it (LOCAL_WORLD_SIZE, as torchrun
// sets it; 1 without), at least 64 MiB.
uint64_t DeltaMemoryBytes(const CheckpointerOptions& o);

// Staging bytes a save of tensors of these sizes takes, in whole slabs: a
// slab per whole chunk and per last, partial chunk over half a slab; the
// smaller last chunks take pieces (StagingPool), each size's pieces cut
// from slabs of their own, the last of them perhaps partly used.
// StagingNeeded kept as tensors come, one Add() each (Register() is called
// once per tensor: summing every registration again at each would cost
// O(n^2) for n tensors).
class StagingTally {
 public:
  explicit StagingTally(uint64_t chunk_size) : chunk_size_(chunk_size) {}
  void Add(uint64_t tensor_bytes);
  void Clear();
  uint64_t Needed() const;

 private:
  uint64_t chunk_size_;
  uint64_t slabs_ = 0;
  std::map<uint64_t, uint64_t> pieces_;  // piece size -> count
};

uint64_t StagingNeeded(const std::vector<uint64_t>& tensor_bytes,
                       uint64_t chunk_size);

// The staging pool: one of CheckpointerOptions::staging_bytes, allocated at
// Open (`fixed`), or, by default, sized to the largest state saved so far
// up to StagingPool::DefaultBytes(), so a small job does not pin a large
// pool and a tiny first save does not leave every later one snapshotting
// through a few slabs; an earlier Checkpointer's parked pool (SparePool)
// when it is large enough. Pinned for CUDA once a CUDA source exists.
class Staging {
 public:
  Staging(std::unique_ptr<StagingPool> fixed, uint64_t chunk_size,
          std::string job);
  // Unpins the pool; a default pool is parked for the process's next
  // Checkpointer (SparePool).
  ~Staging();

  // Before a save that needs `needed` bytes: creates or grows the default
  // pool, faulted in now with `populate` (else by the snapshot's copies,
  // off the caller's thread for a lazy save). With `in_use` (another save
  // holds slabs) the pool is not replaced and grows at a later save. A
  // state over the cap logs once.
  Status Size(uint64_t needed, bool in_use, bool populate = true);
  // The source to pin the pool with (the first CUDA one); the pool is
  // pinned now and whenever it is replaced. A pool that cannot be pinned
  // still works, just slower.
  void SetCuda(SnapshotSource* cuda);
  // Unpins the pool; before the CUDA source goes away.
  void Unpin();

  StagingPool* pool() const { return pool_.get(); }
  // An explicit staging_bytes pool (never resized).
  bool fixed() const { return fixed_; }
  // The pool's size (0: none yet); safe from any thread.
  uint64_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  void Pin();

  std::unique_ptr<StagingPool> pool_;
  const bool fixed_;
  const uint64_t chunk_size_;
  const std::string job_;
  SnapshotSource* cuda_ = nullptr;
  bool pinned_ = false;
  bool warned_ = false;
  std::atomic<uint64_t> size_{0};
};

}  // namespace stagger::client

#endif  // STAGGER_CLIENT_MEMORY_H_
