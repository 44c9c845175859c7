#include "client/memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "client/spare_pool.h"
#include "util/log.h"

namespace stagger::client {

uint64_t DeltaMemoryBytes(const CheckpointerOptions& o) {
  return o.delta_memory_bytes != 0 ? o.delta_memory_bytes : HostMemoryShare();
}

void StagingTally::Add(uint64_t bytes) {
  slabs_ += bytes / chunk_size_;
  const uint64_t tail = bytes % chunk_size_;
  if (tail == 0) return;
  const uint64_t piece = StagingPool::Footprint(tail, chunk_size_);
  if (piece < chunk_size_) {
    ++pieces_[piece];
  } else {
    ++slabs_;  // a tail over half a slab takes a whole one
  }
}

void StagingTally::Clear() {
  slabs_ = 0;
  pieces_.clear();
}

uint64_t StagingTally::Needed() const {
  uint64_t slabs = slabs_;
  // Each size's pieces are cut from slabs of their own.
  for (const auto& [piece, n] : pieces_) {
    slabs += (n * piece + chunk_size_ - 1) / chunk_size_;
  }
  return slabs * chunk_size_;
}

uint64_t StagingNeeded(const std::vector<uint64_t>& tensor_bytes,
                       uint64_t chunk_size) {
  StagingTally tally(chunk_size);
  for (uint64_t bytes : tensor_bytes) tally.Add(bytes);
  return tally.Needed();
}

Staging::Staging(std::unique_ptr<StagingPool> fixed, uint64_t chunk_size,
                 std::string job)
    : pool_(std::move(fixed)),
      fixed_(pool_ != nullptr),
      chunk_size_(chunk_size),
      job_(std::move(job)),
      size_(pool_ ? pool_->size() : 0) {}

Status Staging::Size(uint64_t needed, bool in_use, bool populate) {
  if (fixed_) return absl::OkStatus();
  // Whole slabs, as the pool maps them: a pool made for `want` then
  // satisfies the next save of the same state instead of being made anew.
  const uint64_t slab = chunk_size_;
  const uint64_t cap =
      std::max(slab, StagingPool::DefaultBytes() / slab * slab);
  const uint64_t want = std::min(cap, (needed + slab - 1) / slab * slab);
  if (pool_ && pool_->size() >= want) return absl::OkStatus();
  if (needed > cap && !warned_) {
    warned_ = true;
    log::Info(
        "stagger",
        absl::StrCat("job '", job_, "': the state needs ", needed,
                     " bytes of staging, more than the default pool's ", cap,
                     "; saves snapshot it in pieces (set "
                     "CheckpointerOptions::staging_bytes, Python "
                     "staging_bytes=, for more)"));
  }
  if (pool_ && in_use) return absl::OkStatus();  // grows at a later save
  // An earlier Checkpointer's pool, already mapped and faulted in, when it
  // is large enough.
  std::unique_ptr<StagingPool> pool = SparePool::Take(want, cap, chunk_size_);
  if (pool == nullptr || !pool->Reset().ok()) {
    STAGGER_ASSIGN_OR_RETURN(pool,
                             StagingPool::Create(want, chunk_size_, populate));
  }
  Unpin();
  pool_ = std::move(pool);
  size_ = pool_->size();
  Pin();
  return absl::OkStatus();
}

Staging::~Staging() {
  Unpin();
  if (!fixed_) SparePool::Park(std::move(pool_));
}

void Staging::SetCuda(SnapshotSource* cuda) {
  if (cuda_ != nullptr) return;  // the first source pins
  cuda_ = cuda;
  Pin();
}

void Staging::Pin() {
  if (!pool_ || pinned_ || cuda_ == nullptr) return;
  Status s = cuda_->RegisterStaging(pool_->base(), pool_->size());
  if (!s.ok()) {
    log::Warning("stagger",
                 absl::StrCat("staging memory not pinned (", s.message(),
                              "); CUDA snapshots will be slower"));
    return;
  }
  pinned_ = true;
}

void Staging::Unpin() {
  if (pinned_ && pool_ && cuda_ != nullptr) {
    cuda_->UnregisterStaging(pool_->base());
  }
  pinned_ = false;
}

}  // namespace stagger::client
