#include "client/staging_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace stagger::client {

uint64_t StagingPool::DefaultBytes() {
  uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                  static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  return std::min<uint64_t>(1ull << 30,
                            std::max<uint64_t>(phys / 16, 64 << 20));
}

Result<std::unique_ptr<StagingPool>> StagingPool::Create(uint64_t total_bytes,
                                                         uint64_t slab_bytes) {
  if (slab_bytes == 0 || slab_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staging slab of ", slab_bytes, " bytes is not a multiple of 4096"));
  }
  uint64_t slabs = std::max<uint64_t>(1, total_bytes / slab_bytes);
  uint64_t len = slabs * slab_bytes;
  // MAP_POPULATE pre-faults the pages so the first snapshot does not pay
  // for them inside the training loop's stall.
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map ", len, " bytes of staging memory: ", strerror(errno)));
  }
  return std::unique_ptr<StagingPool>(
      new StagingPool(static_cast<char*>(p), slabs, slab_bytes));
}

StagingPool::StagingPool(char* base, uint64_t slabs, uint64_t slab_bytes)
    : base_(base), slabs_(slabs), slab_bytes_(slab_bytes) {
  free_.reserve(slabs);
  for (uint64_t i = slabs; i > 0; --i)
    free_.push_back(base + (i - 1) * slab_bytes);
}

StagingPool::~StagingPool() { munmap(base_, slabs_ * slab_bytes_); }

char* StagingPool::Acquire(bool* waited) {
  absl::MutexLock lock(&mu_);
  if (waited) *waited = free_.empty();
  mu_.Await(absl::Condition(
      +[](std::vector<char*>* f) { return !f->empty(); }, &free_));
  char* slab = free_.back();
  free_.pop_back();
  peak_slabs_ = std::max<uint64_t>(peak_slabs_, slabs_ - free_.size());
  return slab;
}

char* StagingPool::TryAcquire() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return nullptr;
  char* slab = free_.back();
  free_.pop_back();
  peak_slabs_ = std::max<uint64_t>(peak_slabs_, slabs_ - free_.size());
  return slab;
}

void StagingPool::Release(char* slab) {
  absl::MutexLock lock(&mu_);
  free_.push_back(slab);
}

uint64_t StagingPool::in_use_bytes() const {
  absl::MutexLock lock(&mu_);
  return (slabs_ - free_.size()) * slab_bytes_;
}

uint64_t StagingPool::peak_bytes() const {
  absl::MutexLock lock(&mu_);
  return peak_slabs_ * slab_bytes_;
}

}  // namespace stagger::client
