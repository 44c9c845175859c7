// Pacer: holds a stream of bytes to an average rate, for background work
// such as compaction. The clock is a template parameter so tests can drive
// it by hand.
//
// Thread-compatible: one user at a time.
#ifndef STAGGER_SERVER_INTERNAL_PACER_H_
#define STAGGER_SERVER_INTERNAL_PACER_H_

#include <chrono>
#include <cstdint>

namespace stagger::server_internal {

template <typename Clock>
class Pacer {
 public:
  using Duration = typename Clock::duration;

  // `bytes_per_s` 0: unlimited. The average is taken from construction.
  explicit Pacer(uint64_t bytes_per_s)
      : rate_(bytes_per_s), start_(Clock::now()) {}

  // Counts `bytes` as sent and returns how long the caller must wait before
  // sending more to stay at the rate (zero when it is behind schedule).
  Duration Add(uint64_t bytes) {
    if (rate_ == 0) return Duration::zero();
    sent_ += bytes;
    const auto due =
        start_ +
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(
            static_cast<double>(sent_) / static_cast<double>(rate_)));
    const auto now = Clock::now();
    return due > now ? Duration(due - now) : Duration::zero();
  }

 private:
  const uint64_t rate_;
  const typename Clock::time_point start_;
  uint64_t sent_ = 0;
};

}  // namespace stagger::server_internal

#endif  // STAGGER_SERVER_INTERNAL_PACER_H_
