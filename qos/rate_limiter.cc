#include "qos/rate_limiter.h"

#include <algorithm>

namespace stagger::qos {

absl::string_view NameOf(Priority priority) {
  switch (priority) {
    case Priority::kRestore:
      return "restore";
    case Priority::kCheckpoint:
      return "checkpoint";
    case Priority::kBackground:
      return "background";
  }
  return "unknown";
}

BackgroundLimiter::BackgroundLimiter(BackgroundLimiterOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : RealClock::Get()),
      cap_(options_.bytes_per_s, /*burst_bytes=*/0) {}

void BackgroundLimiter::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
}

bool BackgroundLimiter::SleepUntil(int64_t t_ns) {
  const int64_t step = std::max<int64_t>(options_.poll_ns, 1);
  for (int64_t now = clock_->NowNs(); now < t_ns; now = clock_->NowNs()) {
    if (cancelled_.load(std::memory_order_relaxed)) return false;
    clock_->SleepUntilNs(t_ns - now > step ? now + step : t_ns);
  }
  return !cancelled_.load(std::memory_order_relaxed);
}

Status BackgroundLimiter::Request(uint64_t bytes, Priority priority) {
  auto cancelled = [] {
    return absl::CancelledError("rate limiter cancelled (shutting down)");
  };
  if (cancelled_.load(std::memory_order_relaxed)) return cancelled();
  if (priority == Priority::kBackground && options_.clients_busy &&
      options_.max_yield_ns > 0) {
    const int64_t start = clock_->NowNs();
    const int64_t until = options_.max_yield_ns > INT64_MAX - start
                              ? INT64_MAX
                              : start + options_.max_yield_ns;
    int64_t now = start;
    while (now < until && options_.clients_busy()) {
      if (!SleepUntil(std::min(until, now + options_.poll_ns))) {
        yielded_ns_.fetch_add(clock_->NowNs() - start,
                              std::memory_order_relaxed);
        return cancelled();
      }
      now = clock_->NowNs();
    }
    yielded_ns_.fetch_add(now - start, std::memory_order_relaxed);
  }
  if (bytes == 0) return absl::OkStatus();
  const int64_t now = clock_->NowNs();
  const int64_t at = cap_.Reserve(now, bytes);
  if (at <= now) return absl::OkStatus();
  const bool ok = SleepUntil(at);
  capped_ns_.fetch_add(clock_->NowNs() - now, std::memory_order_relaxed);
  return ok ? absl::OkStatus() : cancelled();
}

}  // namespace stagger::qos
