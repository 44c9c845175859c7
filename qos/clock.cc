#include "qos/clock.h"

#include <chrono>
#include <iterator>
#include <thread>

namespace stagger::qos {

Clock* RealClock::Get() {
  // Leaked on purpose: components may read the clock during static
  // destruction.
  static RealClock* const clock = new RealClock;
  return clock;
}

int64_t RealClock::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void RealClock::SleepUntilNs(int64_t t_ns) {
  std::this_thread::sleep_until(
      std::chrono::steady_clock::time_point(std::chrono::nanoseconds(t_ns)));
}

SimulatedClock::SimulatedClock(int64_t start_ns) : now_ns_(start_ns) {}

int64_t SimulatedClock::NowNs() const {
  absl::MutexLock lock(&mu_);
  return now_ns_;
}

void SimulatedClock::SleepUntilNs(int64_t t_ns) {
  mu_.Lock();
  ++sleep_calls_;
  if (t_ns > now_ns_) slept_ns_ += t_ns - now_ns_;
  RunUntilAndUnlock(t_ns);
}

void SimulatedClock::Advance(int64_t delta_ns) {
  mu_.Lock();
  // The target is taken under the lock so that concurrent advances add up.
  RunUntilAndUnlock(now_ns_ + (delta_ns > 0 ? delta_ns : 0));
}

void SimulatedClock::AdvanceTo(int64_t t_ns) {
  mu_.Lock();
  RunUntilAndUnlock(t_ns);
}

void SimulatedClock::RunUntilAndUnlock(int64_t t_ns) {
  for (;;) {
    auto it = events_.begin();
    if (it == events_.end() || it->first.first > t_ns) {
      if (t_ns > now_ns_) now_ns_ = t_ns;
      mu_.Unlock();
      return;
    }
    // Time stops at each callback so that it reads its own time.
    if (it->first.first > now_ns_) now_ns_ = it->first.first;
    absl::AnyInvocable<void()> fn = std::move(it->second);
    events_.erase(it);
    mu_.Unlock();
    fn();
    mu_.Lock();
  }
}

void SimulatedClock::ScheduleAt(int64_t at_ns, absl::AnyInvocable<void()> fn) {
  absl::MutexLock lock(&mu_);
  events_.emplace(std::make_pair(at_ns, next_seq_++), std::move(fn));
}

int64_t SimulatedClock::sleep_calls() const {
  absl::MutexLock lock(&mu_);
  return sleep_calls_;
}

int64_t SimulatedClock::slept_ns() const {
  absl::MutexLock lock(&mu_);
  return slept_ns_;
}

ManualClock::ManualClock(int64_t start_ns) : now_ns_(start_ns) {}

int64_t ManualClock::NowNs() const {
  absl::MutexLock lock(&mu_);
  return now_ns_;
}

void ManualClock::SleepUntilNs(int64_t t_ns) {
  absl::MutexLock lock(&mu_);
  if (now_ns_ >= t_ns) return;
  const auto it = wakeups_.insert(t_ns);
  auto due = [this, t_ns]()
                 ABSL_SHARED_LOCKS_REQUIRED(mu_) { return now_ns_ >= t_ns; };
  mu_.Await(absl::Condition(&due));
  wakeups_.erase(it);
}

void ManualClock::Advance(int64_t delta_ns) {
  absl::MutexLock lock(&mu_);
  if (delta_ns > 0) now_ns_ += delta_ns;
}

bool ManualClock::AwaitSleepers(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  // Sleepers already due but not yet awake do not count: they are about
  // to run.
  auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return std::distance(wakeups_.upper_bound(now_ns_), wakeups_.end()) >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace stagger::qos
