// DeadlinePacer: spreads one checkpoint's bytes so that they finish by a
// deadline at a low, flat rate instead of in a burst (docs/design.md §6.1).
//
// The target rate at time t is
//
//   rate(t) = clamp(remaining_bytes / (deadline - t), floor, cap)
//
// (cap wins over floor). Past the deadline, or without one, the rate is the
// cap, or unlimited when there is no cap. Because the rate is recomputed
// from the bytes still to go, a sender that fell behind (it yielded to a
// collective, or the link was slow) gets a higher rate for the rest.
//
// Reserve hands out start times on a virtual-time schedule: bytes booked at
// time t go at max(t, next), and `next` advances by bytes / rate(start).
// Sending every booked piece at its start time keeps
// (deadline - t) / remaining constant, so with no floor or cap in play the
// last byte leaves exactly at the deadline. Idle time earns no credit: a
// sender that was away restarts the schedule at the current time, so a
// burst is never larger than one reservation.
//
// Thread-safety: thread-safe. The pacer reads no clock; times are passed in.
#ifndef STAGGER_QOS_PACER_H_
#define STAGGER_QOS_PACER_H_

#include <cstdint>
#include <limits>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace stagger::qos {

class DeadlinePacer {
 public:
  // The rate RateBps reports when nothing limits sending.
  static constexpr double kUnlimited = std::numeric_limits<double>::infinity();

  // A pacer that is not started lets everything through at once.
  DeadlinePacer() = default;
  DeadlinePacer(const DeadlinePacer&) = delete;
  DeadlinePacer& operator=(const DeadlinePacer&) = delete;

  // Begins pacing `total_bytes` from `now_ns` to `deadline_ns` (absolute;
  // 0 = no deadline). `floor_Bps` is the lowest rate used (0 = none);
  // `cap_Bps` the highest (0 = no cap). Negative or non-finite rates count as
  // 0. Replaces any earlier schedule and zeroes the bytes sent.
  void Start(int64_t now_ns, uint64_t total_bytes, int64_t deadline_ns,
             double floor_Bps, double cap_Bps);

  // How far behind the current time the schedule may be when bytes are
  // booked (see above); >= 0. Kept across Start().
  void set_max_credit_ns(int64_t ns);

  // The target rate at `now_ns` for the bytes not yet booked, in bytes per
  // second; kUnlimited when not started, or past/without a deadline and
  // without a cap. 0 when every announced byte is booked and no floor is
  // set.
  double RateBps(int64_t now_ns) const;

  // Books `bytes` as sent and returns the time at which they may start:
  // `now_ns` when they may go at once. Bytes beyond the announced total are
  // paced as if they were the last ones (rate = bytes / time left).
  int64_t Reserve(int64_t now_ns, uint64_t bytes);

  bool started() const;
  uint64_t total_bytes() const;
  uint64_t sent_bytes() const;
  int64_t deadline_ns() const;
  // The rate the last Reserve used (kUnlimited before any).
  double last_rate_Bps() const;

 private:
  double RateLocked(int64_t now_ns, uint64_t remaining) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sent_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t deadline_ns_ ABSL_GUARDED_BY(mu_) = 0;
  double floor_Bps_ ABSL_GUARDED_BY(mu_) = 0;
  double cap_Bps_ ABSL_GUARDED_BY(mu_) = 0;
  // Start time of the next booking on the virtual schedule.
  int64_t next_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_credit_ns_ ABSL_GUARDED_BY(mu_) = 0;
  double last_rate_Bps_ ABSL_GUARDED_BY(mu_) = kUnlimited;
};

}  // namespace stagger::qos

#endif  // STAGGER_QOS_PACER_H_
