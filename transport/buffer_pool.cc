#include "transport/buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>

#include "util/memory_map.h"

namespace stagger::transport {

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_cached_bytes,
                                               bool huge_pages) {
  return std::shared_ptr<BufferPool>(
      new BufferPool(max_cached_bytes, huge_pages));
}

BufferPool::~BufferPool() {
  for (const auto& [block, p] : free_) ::munmap(p, block);
}

char* BufferPool::Map(size_t block, bool populate) {
  // Huge pages: the first touch of a new block (a buffer held long, as the
  // server's memory tier holds them) takes a fault per 2 MiB instead of
  // one per 4 KiB page.
  util::MapOptions o;
  o.huge_pages = huge_pages_;
  o.populate = populate;
  return util::MapAnonymous(block, o);
}

size_t BufferPool::Prefill(size_t bytes, size_t size, size_t headroom,
                           const std::atomic<bool>* stop) {
  const size_t need = headroom + size;
  if (need < kGranule) return 0;
  const size_t block = (need + kGranule - 1) / kGranule * kGranule;
  size_t added = 0;
  while (stop == nullptr || !stop->load()) {
    {
      absl::MutexLock l(&mu_);
      if (cached_ + block > std::min(bytes, max_cached_)) break;
    }
    char* p = Map(block, /*populate=*/true);
    if (p == nullptr) break;
    absl::MutexLock l(&mu_);
    free_.emplace(block, p);
    cached_ += block;
    ++stats_.prefilled;
    ++added;
  }
  return added;
}

Buffer BufferPool::Get(size_t size, size_t headroom) {
  const size_t need = headroom + size;
  if (need < kGranule) return Buffer::WithHeadroom(size, headroom);
  const size_t block = (need + kGranule - 1) / kGranule * kGranule;
  char* p = nullptr;
  size_t got = block;
  {
    absl::MutexLock l(&mu_);
    auto it = free_.lower_bound(block);
    if (it != free_.end() && it->first <= block + block / 8) {
      got = it->first;
      p = it->second;
      cached_ -= got;
      free_.erase(it);
      ++stats_.reused;
    } else {
      ++stats_.mapped;
    }
  }
  if (p == nullptr) {
    p = Map(block);
    // Out of address space or map count: an ordinary buffer (which aborts
    // only where operator new would).
    if (p == nullptr) return Buffer::WithHeadroom(size, headroom);
  }
  return Buffer::Adopt(p, got, size, headroom, shared_from_this());
}

void BufferPool::Recycle(char* p, size_t block) {
  {
    absl::MutexLock l(&mu_);
    if (cached_ + block <= max_cached_) {
      free_.emplace(block, p);
      cached_ += block;
      return;
    }
  }
  ::munmap(p, block);
}

BufferPool::Stats BufferPool::stats() const {
  absl::MutexLock l(&mu_);
  Stats s = stats_;
  s.cached_bytes = cached_;
  return s;
}

}  // namespace stagger::transport
