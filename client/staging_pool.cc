#include "client/staging_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "qos/cpu_share.h"
#include "util/memory_map.h"

namespace stagger::client {

uint64_t HostMemoryShare() {
  const uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  const uint64_t local_ranks = static_cast<uint64_t>(qos::LocalWorldSize());
  return std::max<uint64_t>(phys / 8 / local_ranks, 64ull << 20);
}

uint64_t StagingPool::DefaultBytes() { return HostMemoryShare(); }

Result<std::unique_ptr<StagingPool>> StagingPool::Create(uint64_t total_bytes,
                                                         uint64_t slab_bytes,
                                                         bool populate) {
  if (slab_bytes == 0 || slab_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staging slab of ", slab_bytes, " bytes is not a multiple of 4096"));
  }
  uint64_t slabs = std::max<uint64_t>(1, total_bytes / slab_bytes);
  uint64_t len = slabs * slab_bytes;
  util::MapOptions o;
  // A pool of one slab (a state of at most a chunk: a small rank, often
  // only pieces of a few KiB) is left to fault in at its first copies, on
  // small pages: it costs what the state touches, not a faulted slab (4
  // MiB a rank, most of a process's memory with thousands of ranks in it),
  // and the first snapshot's faults are those of a chunk at most.
  const bool lazy = slabs == 1;
  // On huge pages: faulting it in (now, or at the first snapshot's copies)
  // costs a fault per 2 MiB instead of one per 4 KiB page.
  o.huge_pages = !lazy;
  // Pre-faulted so the first snapshot does not pay for the pages inside
  // the training loop's stall.
  o.populate = populate && !lazy;
  // A data loader's forked workers neither inherit the pool nor share its
  // pages copy-on-write.
  o.dont_fork = true;
  char* p = util::MapAnonymous(len, o);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map ", len, " bytes of staging memory: ", strerror(errno)));
  }
  return std::unique_ptr<StagingPool>(new StagingPool(p, slabs, slab_bytes));
}

StagingPool::StagingPool(char* base, uint64_t slabs, uint64_t slab_bytes)
    : base_(base), slabs_(slabs), slab_bytes_(slab_bytes), cut_(slabs, 0) {
  free_.reserve(slabs);
  for (uint64_t i = slabs; i > 0; --i)
    free_.push_back(base + (i - 1) * slab_bytes);
}

StagingPool::~StagingPool() { util::Unmap(base_, slabs_ * slab_bytes_); }

uint64_t StagingPool::Footprint(uint64_t len, uint64_t slab_bytes) {
  if (len == 0 || 2 * len > slab_bytes) return slab_bytes;
  uint64_t piece = 4096;
  while (piece < len) piece <<= 1;
  return piece;
}

int StagingPool::ClassOf(uint64_t len) const {
  const uint64_t piece = Footprint(len);
  return piece == slab_bytes_ ? 0 : __builtin_ctzll(piece);
}

bool StagingPool::CanTakeLocked(int c) const {
  return !free_.empty() || (c != 0 && !pieces_[c].empty());
}

char* StagingPool::TakeLocked(int c) {
  uint64_t bytes = slab_bytes_;
  char* out = nullptr;
  if (c == 0) {
    if (free_.empty()) return nullptr;
    out = free_.back();
    free_.pop_back();
  } else {
    bytes = 1ull << c;
    if (pieces_[c].empty()) {
      if (free_.empty()) return nullptr;
      // Cut a whole slab into pieces of this size.
      char* slab = free_.back();
      free_.pop_back();
      cut_[(slab - base_) / slab_bytes_] = static_cast<uint8_t>(c);
      for (uint64_t off = slab_bytes_ / bytes * bytes; off > 0; off -= bytes) {
        pieces_[c].push_back(slab + off - bytes);
      }
    }
    out = pieces_[c].back();
    pieces_[c].pop_back();
  }
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return out;
}

char* StagingPool::Acquire(uint64_t len, bool* waited) {
  const int c = ClassOf(len);
  absl::MutexLock lock(&mu_);
  if (waited) *waited = !CanTakeLocked(c);
  auto can = [this, c]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return CanTakeLocked(c);
  };
  mu_.Await(absl::Condition(&can));
  return TakeLocked(c);
}

char* StagingPool::TryAcquire(uint64_t len) {
  absl::MutexLock lock(&mu_);
  return TakeLocked(ClassOf(len));
}

void StagingPool::Release(char* slab) {
  absl::MutexLock lock(&mu_);
  const int c = cut_[(slab - base_) / slab_bytes_];
  if (c == 0) {
    free_.push_back(slab);
    in_use_ -= slab_bytes_;
  } else {
    pieces_[c].push_back(slab);
    in_use_ -= 1ull << c;
  }
}

Status StagingPool::Reset() {
  absl::MutexLock lock(&mu_);
  if (in_use_ != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "staging pool reset with ", in_use_, " bytes still acquired"));
  }
  free_.clear();
  for (uint64_t i = slabs_; i > 0; --i) {
    free_.push_back(base_ + (i - 1) * slab_bytes_);
  }
  for (auto& list : pieces_) list.clear();
  std::fill(cut_.begin(), cut_.end(), 0);
  peak_ = 0;
  return absl::OkStatus();
}

bool StagingPool::FaultInNext() {
  if (slabs_ == 1) return false;  // lazy: Create
  char* slab = nullptr;
  {
    absl::MutexLock lock(&mu_);
    while (slab == nullptr && next_fault_ < slabs_) {
      char* s = base_ + next_fault_ * slab_bytes_;
      ++next_fault_;
      auto it = std::find(free_.begin(), free_.end(), s);
      if (it == free_.end()) continue;  // in use: its copy faults it in
      free_.erase(it);
      slab = s;
    }
    if (slab == nullptr) return false;
  }
  // Off the free list meanwhile: no save writes into it, so the zeros
  // FaultIn writes change nothing anyone reads.
  util::FaultIn(slab, slab_bytes_);
  absl::MutexLock lock(&mu_);
  free_.push_back(slab);  // taken first by the next Acquire
  return true;
}

uint64_t StagingPool::SizeOf(const char* p) const {
  absl::MutexLock lock(&mu_);
  const int c = cut_[(p - base_) / slab_bytes_];
  return c == 0 ? slab_bytes_ : 1ull << c;
}

uint64_t StagingPool::in_use_bytes() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

uint64_t StagingPool::peak_bytes() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

}  // namespace stagger::client
