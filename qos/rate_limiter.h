// The one question every rate decision in stagger answers: may `bytes` go
// now, at this priority? (qos/README.md, "Rates across the system".)
//
// `RateLimiter` is its blocking form, for threads that may wait:
//   - `Shaper` (qos/shaper.h): checkpoint bytes leaving a client, with the
//     deadline pacer, the client and node caps and the collective gate as
//     its policies;
//   - `BackgroundLimiter` (below): the server's own work (drain to the
//     durable tier, compaction, rebase, write-behind), a cap and a yield to
//     the clients being served.
// `CreditLedger` (qos/credits.h) asks it asynchronously, for the server's
// transport threads, which must not block: its answer is a callback.
//
// Thread-safety: every implementation is thread-safe.
#ifndef STAGGER_QOS_RATE_LIMITER_H_
#define STAGGER_QOS_RATE_LIMITER_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/strings/string_view.h"
#include "qos/clock.h"
#include "qos/token_bucket.h"
#include "stagger/status.h"

namespace stagger::qos {

// Who is waiting for the bytes, most urgent first.
enum class Priority {
  kRestore = 0,     // a job waits to resume from them
  kCheckpoint = 1,  // a save is in flight; training does not wait on it
  kBackground = 2,  // the server's own work, after every client
};
inline constexpr int kPriorities = 3;
absl::string_view NameOf(Priority priority);

class RateLimiter {
 public:
  virtual ~RateLimiter() = default;

  // Blocks until `bytes` at `priority` may go, then returns OK: the caller
  // moves them at once. CANCELLED after Cancel(), for pending and future
  // calls; bytes booked by a cancelled call stay booked.
  virtual Status Request(uint64_t bytes, Priority priority) = 0;
  // Makes pending and future Request calls return CANCELLED.
  virtual void Cancel() = 0;
};

struct BackgroundLimiterOptions {
  // The cap (a TokenBucket without burst: time spent elsewhere is not made
  // up for); <= 0 = no cap.
  double bytes_per_s = 0;
  // Whether clients are being served now; empty = never. A kBackground
  // request waits while it says so.
  std::function<bool()> clients_busy;
  // The longest one request yields to the clients: the work must progress
  // under steady client traffic. <= 0 = no yield; the default has no bound.
  int64_t max_yield_ns = INT64_MAX;
  // How often a wait looks at clients_busy and Cancel() again.
  int64_t poll_ns = 2'000'000;
  Clock* clock = nullptr;  // RealClock::Get() when null
};

// Server work that comes after every client: a request first yields while
// `clients_busy` says clients are being served (kBackground only, at most
// `max_yield_ns`), then waits for the cap.
class BackgroundLimiter final : public RateLimiter {
 public:
  explicit BackgroundLimiter(BackgroundLimiterOptions options);
  BackgroundLimiter(const BackgroundLimiter&) = delete;
  BackgroundLimiter& operator=(const BackgroundLimiter&) = delete;

  Status Request(uint64_t bytes, Priority priority) override;
  void Cancel() override;

  // Time requests spent yielding to clients, and waiting for the cap.
  int64_t yielded_ns() const {
    return yielded_ns_.load(std::memory_order_relaxed);
  }
  int64_t capped_ns() const {
    return capped_ns_.load(std::memory_order_relaxed);
  }

 private:
  // Sleeps until t_ns in steps of poll_ns; false once cancelled.
  bool SleepUntil(int64_t t_ns);

  const BackgroundLimiterOptions options_;
  Clock* const clock_;
  TokenBucket cap_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> yielded_ns_{0};
  std::atomic<int64_t> capped_ns_{0};
};

}  // namespace stagger::qos

#endif  // STAGGER_QOS_RATE_LIMITER_H_
