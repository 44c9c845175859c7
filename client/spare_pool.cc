#include "client/spare_pool.h"

#include <unistd.h>

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace stagger::client {
namespace {

// The parked pool and the timer that unmaps it. Never destroyed: the timer
// thread may outlive static destruction at exit.
struct Spare {
  absl::Mutex mu;
  std::unique_ptr<StagingPool> pool ABSL_GUARDED_BY(mu);
  absl::Time expires ABSL_GUARDED_BY(mu);
  // The deadline the timer waits for; InfinitePast while it waits for none.
  absl::Time waiting_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  pid_t timer_pid ABSL_GUARDED_BY(mu) = 0;  // the process the timer runs in

  // Unmaps the pool once it expires; waits while none is parked.
  void Timer() {
    absl::MutexLock l(&mu);
    for (;;) {
      mu.Await(absl::Condition(
          +[](std::unique_ptr<StagingPool>* p) { return *p != nullptr; },
          &pool));
      // Wakes early when a pool is taken or another is parked.
      const StagingPool* watched = pool.get();
      auto changed = [this, watched]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return pool.get() != watched;
      };
      waiting_until = expires;
      const bool woken =
          mu.AwaitWithDeadline(absl::Condition(&changed), expires);
      waiting_until = absl::InfinitePast();
      if (!woken) {
        std::unique_ptr<StagingPool> gone = std::move(pool);
        mu.Unlock();
        gone.reset();  // munmap outside the lock
        mu.Lock();
      }
    }
  }

  // Starts the timer in this process once (again in a forked child).
  void EnsureTimer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (timer_pid == getpid()) return;
    timer_pid = getpid();
    std::thread([this] { Timer(); }).detach();
  }
};

Spare& TheSpare() {
  static Spare* spare = new Spare;
  return *spare;
}

}  // namespace

void SparePool::Park(std::unique_ptr<StagingPool> pool,
                     std::chrono::milliseconds keep) {
  if (pool == nullptr) return;
  Spare& s = TheSpare();
  std::unique_ptr<StagingPool> dropped;
  {
    absl::MutexLock l(&s.mu);
    if (s.pool != nullptr && s.pool->size() > pool->size()) {
      dropped = std::move(pool);
    } else {
      dropped = std::move(s.pool);
      s.pool = std::move(pool);
      s.expires = absl::Now() + absl::FromChrono(keep);
      s.EnsureTimer();
    }
  }
  // `dropped` is unmapped here, outside the lock.
}

std::unique_ptr<StagingPool> SparePool::Take(uint64_t min_bytes,
                                             uint64_t max_bytes,
                                             uint64_t slab_bytes) {
  Spare& s = TheSpare();
  absl::MutexLock l(&s.mu);
  if (s.pool == nullptr || s.pool->slab_bytes() != slab_bytes ||
      s.pool->size() < min_bytes || s.pool->size() > max_bytes) {
    return nullptr;
  }
  return std::move(s.pool);
}

std::chrono::milliseconds SparePool::TimerWaitLeft() {
  Spare& s = TheSpare();
  absl::MutexLock l(&s.mu);
  const absl::Duration left = s.waiting_until - absl::Now();
  return left > absl::ZeroDuration()
             ? std::chrono::milliseconds(absl::ToInt64Milliseconds(left))
             : std::chrono::milliseconds(0);
}

uint64_t SparePool::ParkedBytes() {
  Spare& s = TheSpare();
  absl::MutexLock l(&s.mu);
  return s.pool == nullptr ? 0 : s.pool->size();
}

}  // namespace stagger::client
