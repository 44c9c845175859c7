// Clock: the time source every qos/ component runs on, so that pacing,
// token buckets and the collective gate can be tested without real sleeps.
//
// Times are int64 nanoseconds on a monotonic axis. RealClock reads
// std::chrono::steady_clock (CLOCK_MONOTONIC on Linux, which is system-wide,
// so its values can be compared across the processes of one node).
// SimulatedClock is a manual clock with a small event queue: tests schedule
// callbacks (an iteration's collective marks, say) at simulated times, and
// advancing the clock, including a component's own SleepUntilNs, runs them
// in time order. ManualClock is a manual clock whose SleepUntilNs blocks until
// a test moves the time, for tests that drive waiting threads step by step.
//
// Thread-safety: all clocks are thread-safe. Invariant: NowNs() never
// decreases.
#ifndef STAGGER_QOS_CLOCK_H_
#define STAGGER_QOS_CLOCK_H_

#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace stagger::qos {

// A millisecond and a second on a Clock's axis, in nanoseconds.
inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kSec = 1'000'000'000;

class Clock {
 public:
  virtual ~Clock() = default;
  // Current time in nanoseconds; never decreases.
  virtual int64_t NowNs() const = 0;
  // Blocks until NowNs() >= t_ns; returns at once if that time has passed.
  virtual void SleepUntilNs(int64_t t_ns) = 0;
};

// The process's steady clock.
class RealClock final : public Clock {
 public:
  // The process-wide instance; never destroyed, safe to use from any thread
  // and during static destruction.
  static Clock* Get();

  int64_t NowNs() const override;
  void SleepUntilNs(int64_t t_ns) override;
};

// A manual clock for tests. Time moves only through Advance, AdvanceTo and
// SleepUntilNs; SleepUntilNs(t) does not block but moves the time to t (if
// later), so single-threaded tests of blocking code run instantly.
//
// Scheduled callbacks run on the thread that moves the time, without the
// clock's lock held, in order of time and then of scheduling; while one runs,
// NowNs() returns its scheduled time. A callback may schedule others and may
// read the clock, but must not advance it.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(int64_t start_ns = 0);
  SimulatedClock(const SimulatedClock&) = delete;
  SimulatedClock& operator=(const SimulatedClock&) = delete;

  int64_t NowNs() const override;
  // Moves the time to t_ns if that is later, running due callbacks; never
  // blocks.
  void SleepUntilNs(int64_t t_ns) override;

  // Moves the time forward by delta_ns (>= 0) and runs the callbacks due
  // meanwhile; Advance(0) runs those already due.
  void Advance(int64_t delta_ns);
  // Moves the time to t_ns if later, and runs the callbacks due up to it.
  void AdvanceTo(int64_t t_ns);

  // Runs fn when the time reaches at_ns (on the next advance if at_ns is not
  // in the future).
  void ScheduleAt(int64_t at_ns, absl::AnyInvocable<void()> fn);

  // Calls of SleepUntilNs so far, and the time they moved the clock by.
  int64_t sleep_calls() const;
  int64_t slept_ns() const;

 private:
  // Runs the callbacks due up to t_ns, moves the time there, and unlocks.
  void RunUntilAndUnlock(int64_t t_ns) ABSL_UNLOCK_FUNCTION(mu_);

  mutable absl::Mutex mu_;
  int64_t now_ns_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Keyed by (time, scheduling order).
  std::map<std::pair<int64_t, uint64_t>, absl::AnyInvocable<void()>> events_
      ABSL_GUARDED_BY(mu_);
  int64_t sleep_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t slept_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// A manual clock whose sleeps block: SleepUntilNs(t) returns once a test has
// moved the time to t or beyond. For tests of threads that wait on time (a
// sender held at the collective gate) where what matters is what happens
// while they wait: the time moves only when the test says, one step at a
// time, and AwaitSleepers tells it when the threads are waiting.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ns = 0);
  ManualClock(const ManualClock&) = delete;
  ManualClock& operator=(const ManualClock&) = delete;

  int64_t NowNs() const override;
  // Blocks until NowNs() >= t_ns.
  void SleepUntilNs(int64_t t_ns) override;

  // Moves the time forward by delta_ns (>= 0) and wakes the sleepers due.
  void Advance(int64_t delta_ns);
  // Waits, in real time up to `timeout`, until at least n threads are
  // blocked in SleepUntilNs for a time still ahead; returns whether they
  // are.
  bool AwaitSleepers(int n, absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  int64_t now_ns_ ABSL_GUARDED_BY(mu_);
  // The times the blocked sleepers wait for.
  std::multiset<int64_t> wakeups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagger::qos

#endif  // STAGGER_QOS_CLOCK_H_
