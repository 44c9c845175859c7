// RingAllocator: first-in first-out space accounting for the device staging
// ring of the CUDA snapshot source. Pure offset arithmetic (no CUDA), so it
// is tested without a device.
//
// Allocations are freed in the order they were made, which is the order the
// source's copies complete in. An allocation is contiguous; when it does not
// fit at the end of the ring it wraps to offset 0 and the skipped tail is
// accounted to it until it is freed.
//
// Thread-safety: none; the owner serializes calls.
#ifndef STAGGER_CLIENT_CUDA_INTERNAL_RING_ALLOCATOR_H_
#define STAGGER_CLIENT_CUDA_INTERNAL_RING_ALLOCATOR_H_

#include <cstdint>
#include <deque>
#include <optional>

namespace stagger::client_internal {

class RingAllocator {
 public:
  // `alignment` must be a power of two; every offset is a multiple of it.
  explicit RingAllocator(uint64_t capacity, uint64_t alignment = 256)
      : capacity_(capacity & ~(alignment - 1)), alignment_(alignment) {}

  uint64_t capacity() const { return capacity_; }
  // Bytes held, including alignment padding and skipped tails.
  uint64_t in_use() const { return in_use_; }
  size_t allocations() const { return live_.size(); }

  // Offset of `len` (> 0) contiguous bytes, or nullopt when they do not fit
  // in the free space now (or ever: len > capacity, len == 0).
  std::optional<uint64_t> Allocate(uint64_t len) {
    if (len == 0 || len > capacity_) return std::nullopt;
    const uint64_t n = (len + alignment_ - 1) & ~(alignment_ - 1);
    if (live_.empty()) head_ = 0;
    uint64_t offset;
    uint64_t held = n;
    const uint64_t tail = live_.empty() ? 0 : live_.front().offset;
    if (live_.empty() || head_ > tail) {
      // Live data is [tail, head_): free space is [head_, capacity_) and
      // [0, tail).
      if (capacity_ - head_ >= n) {
        offset = head_;
      } else if (n <= tail) {
        offset = 0;
        held += capacity_ - head_;  // the skipped tail
      } else {
        return std::nullopt;
      }
    } else {
      // Wrapped: live data is [tail, capacity_) and [0, head_); free space
      // is [head_, tail).
      if (tail - head_ < n) return std::nullopt;
      offset = head_;
    }
    head_ = offset + n;
    in_use_ += held;
    live_.push_back({offset, held});
    return offset;
  }

  // Frees the oldest live allocation. No-op when there is none.
  void FreeOldest() {
    if (live_.empty()) return;
    in_use_ -= live_.front().held;
    live_.pop_front();
    if (live_.empty()) head_ = 0;
  }

 private:
  struct Live {
    uint64_t offset;
    uint64_t held;
  };
  const uint64_t capacity_;
  const uint64_t alignment_;
  uint64_t head_ = 0;  // where the next allocation starts, if it fits
  uint64_t in_use_ = 0;
  std::deque<Live> live_;  // oldest first
};

}  // namespace stagger::client_internal

#endif  // STAGGER_CLIENT_CUDA_INTERNAL_RING_ALLOCATOR_H_
