// Shaper: the RateLimiter (qos/rate_limiter.h) a client's sender thread
// asks before putting checkpoint bytes on the wire. Its policies, each
// optional:
//   - a DeadlinePacer (the checkpoint's deadline rate),
//   - a client TokenBucket and a node TokenBucket (hard caps; the node one
//     is usually a SharedTokenBucket),
//   - a CollectiveGate (yield to the training job's collectives),
// and waits on a Clock until all of them allow the bytes.
//
// Request(bytes, priority), for kCheckpoint and kBackground bytes (a
// kRestore request is not shaped: a job waits to resume from it):
//   1. books the bytes with the pacer and the buckets at once (their waits
//      overlap) and waits until the latest of their start times;
//   2. then waits until the gate is open. If a link rate hint is set, the
//      bytes must also fit the rest of the idle window
//      (bytes / hint <= OpenUntilNs - now); otherwise the window is skipped,
//      unless no predicted window is long enough or max_window_skips windows
//      have been skipped for this call, in which case the bytes go as soon
//      as the gate is open. While the gate is closed and it has a floor
//      rate, bytes may go at that rate instead.
// SetUrgent(true) relaxes step 2 to the collectives actually open (the
// floor rate still applies while one is): no predicted window, no fitting
// (see the setter).
// Every wait is a SleepUntilNs of at most max_sleep_ns, after which the
// state is checked again, so marks and Cancel() take effect within a step.
// With a SimulatedClock a Request returns at once in real time.
//
// Bytes booked by a Request that ends in CANCELLED stay booked.
//
// Ownership: the Shaper owns none of the parts; they must outlive it. The
// same gate and node bucket may serve many shapers.
// Thread-safety: thread-safe; several threads may Request concurrently.
#ifndef STAGGER_QOS_SHAPER_H_
#define STAGGER_QOS_SHAPER_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "qos/clock.h"
#include "qos/collective_gate.h"
#include "qos/pacer.h"
#include "qos/rate_limiter.h"
#include "qos/token_bucket.h"
#include "stagger/status.h"

namespace stagger::qos {

struct ShaperOptions {
  // The time source; nullptr means RealClock::Get().
  Clock* clock = nullptr;
  DeadlinePacer* pacer = nullptr;
  TokenBucket* client_bucket = nullptr;
  TokenBucket* node_bucket = nullptr;
  CollectiveGate* gate = nullptr;
  // Longest single sleep (> 0): bounds how late a wait notices a mark or
  // Cancel().
  int64_t max_sleep_ns = 1'000'000;
  // Idle windows one Request may skip because its bytes do not fit them.
  int max_window_skips = 4;
};

struct ShaperStats {
  // Time spent waiting on the gate (closed, or a window skipped, or the
  // floor rate).
  int64_t yield_ns = 0;
  // Time spent waiting on the pacer's schedule.
  int64_t pace_wait_ns = 0;
  // Time spent waiting on the token buckets beyond the pacer.
  int64_t bucket_wait_ns = 0;
  // The pacer's rate at the last Request; DeadlinePacer::kUnlimited
  // without a pacer.
  double paced_rate_Bps = DeadlinePacer::kUnlimited;
  // Idle windows this shaper sent in (see CollectiveGate::RecordSend).
  uint64_t windows = 0;
  uint64_t acquires = 0;
  uint64_t bytes = 0;
};

class Shaper final : public RateLimiter {
 public:
  explicit Shaper(ShaperOptions options);
  Shaper(const Shaper&) = delete;
  Shaper& operator=(const Shaper&) = delete;

  // Blocks until `bytes` may start, then returns OK; the caller sends them
  // at once. CANCELLED after Cancel() (pending and future calls).
  // Request(0, ...) returns OK at once.
  Status Request(uint64_t bytes, Priority priority) override;

  // Makes pending and future Request calls return CANCELLED.
  void Cancel() override;
  bool cancelled() const;

  // The link's expected rate in bytes per second, used to check that bytes
  // fit an idle window; 0 (the default) = unknown, no fit check.
  void SetLinkRateHint(double rate_Bps);

  // Training waits for these bytes (a Save() blocked behind the save in
  // flight): from now on wait only while a marked collective is open,
  // neither for predicted windows nor to fit bytes into them. Collectives
  // predicted then may never come, as the training loop is not running.
  void SetUrgent(bool urgent) {
    urgent_.store(urgent, std::memory_order_relaxed);
  }

  ShaperStats stats() const;

 private:
  enum class Wait { kPace, kBucket, kGate };
  // Sleeps until min(t_ns, now + max_sleep_ns) and charges the time to
  // `reason`.
  void SleepUntil(int64_t t_ns, Wait reason);
  // Whether the gate lets the bytes start now; otherwise sets *wake_ns.
  bool GateAllows(int64_t now_ns, uint64_t bytes, int* skips,
                  int64_t* skipped_until_ns, int64_t* wake_ns);

  const ShaperOptions options_;
  Clock* const clock_;
  std::atomic<bool> cancelled_{false};
  std::atomic<double> link_rate_Bps_{0};
  std::atomic<bool> urgent_{false};

  mutable absl::Mutex mu_;
  ShaperStats stats_ ABSL_GUARDED_BY(mu_);
  // Next start on the gate's floor-rate schedule.
  int64_t floor_next_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stagger::qos

#endif  // STAGGER_QOS_SHAPER_H_
