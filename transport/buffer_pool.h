// BufferPool: payload buffers of a few MiB, recycled. A pulled payload
// lives from the pull until its handler is done with it (the server:
// written to disk); allocating each one afresh either maps new pages,
// zeroed one fault at a time, or (with the heap tuned to avoid that)
// leaves the heap's high-water mark to fragmentation. The pool maps
// blocks (multiples of 64 KiB) and keeps freed ones for reuse, up to
// `max_cached_bytes`; what does not fit is unmapped. A request reuses a
// cached block at most 1/8 larger than it needs. Requests under 64 KiB
// are ordinary Buffers.
//
// Buffers keep their pool alive (Buffer::Adopt holds a shared_ptr), so
// they may outlive whoever created the pool.
//
// Thread-safety: thread-safe.
#ifndef STAGGER_TRANSPORT_BUFFER_POOL_H_
#define STAGGER_TRANSPORT_BUFFER_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "transport/buffer.h"
#include "util/memory_map.h"

namespace stagger::transport {

class BufferPool final : public BufferRecycler,
                         public std::enable_shared_from_this<BufferPool> {
 public:
  static constexpr size_t kGranule = 64 << 10;
  static constexpr size_t kHugePage = util::kHugePage;

  // With `huge_pages`, new blocks of kHugePage or more start on a huge-page
  // boundary and are advised MADV_HUGEPAGE: the first touch of a block
  // faults once per 2 MiB instead of once per 4 KiB page, which pays where
  // blocks are kept long (the server's memory tier holds received ones).
  // Where blocks come and go (decode buffers), huge pages cost more than
  // they save: a resharding load took twice as long with them.
  static std::shared_ptr<BufferPool> Create(size_t max_cached_bytes,
                                            bool huge_pages = false);
  ~BufferPool() override;  // unmaps the cached blocks

  // `size` bytes after `headroom` (Buffer::WithHeadroom's layout).
  Buffer Get(size_t size, size_t headroom = 0);
  // Maps blocks for Gets of `size` + `headroom` bytes, every page faulted
  // in, until the cache holds `bytes` (or max_cached_bytes) or `stop`
  // turns true: Gets that come later take no page faults. Returns the
  // blocks added.
  size_t Prefill(size_t bytes, size_t size, size_t headroom,
                 const std::atomic<bool>* stop = nullptr);
  void Recycle(char* p, size_t block) override;

 private:
  // A new block of `block` bytes; nullptr when mmap fails. With
  // huge_pages_, blocks of a huge page or more start on a huge-page
  // boundary, advised as huge.
  char* Map(size_t block, bool populate = false);

 public:
  struct Stats {
    uint64_t reused = 0;     // Gets served from the cache
    uint64_t mapped = 0;     // Gets that mapped a new block
    uint64_t prefilled = 0;  // blocks mapped and faulted by Prefill
    size_t cached_bytes = 0;
  };
  Stats stats() const;

 private:
  BufferPool(size_t max_cached_bytes, bool huge_pages)
      : max_cached_(max_cached_bytes), huge_pages_(huge_pages) {}

  const size_t max_cached_;
  const bool huge_pages_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, char*> free_ ABSL_GUARDED_BY(mu_);  // by block size
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::transport

#endif  // STAGGER_TRANSPORT_BUFFER_POOL_H_
