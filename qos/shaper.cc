#include "qos/shaper.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace stagger::qos {
namespace {

constexpr int64_t kForever = std::numeric_limits<int64_t>::max();

ShaperOptions Sanitize(ShaperOptions o) {
  if (o.clock == nullptr) o.clock = RealClock::Get();
  if (o.max_sleep_ns <= 0) o.max_sleep_ns = 1'000'000;
  o.max_window_skips = std::max(o.max_window_skips, 0);
  return o;
}

// Nanoseconds `bytes` take at `rate_Bps`, saturated.
int64_t DurationNs(uint64_t bytes, double rate_Bps) {
  double ns = std::ceil(static_cast<double>(bytes) * 1e9 / rate_Bps);
  if (!(ns < static_cast<double>(int64_t{1} << 60))) return int64_t{1} << 60;
  return static_cast<int64_t>(ns);
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > kForever - b ? kForever : a + b;
}

}  // namespace

Shaper::Shaper(ShaperOptions options)
    : options_(Sanitize(options)), clock_(options_.clock) {}

Status Shaper::Request(uint64_t bytes, Priority priority) {
  if (cancelled()) return absl::CancelledError("qos: shaper cancelled");
  if (bytes == 0 || priority == Priority::kRestore) return absl::OkStatus();
  int64_t now = clock_->NowNs();
  int64_t pace_at = now;
  double rate = DeadlinePacer::kUnlimited;
  if (options_.pacer != nullptr) {
    pace_at = options_.pacer->Reserve(now, bytes);
    rate = options_.pacer->last_rate_Bps();
  }
  int64_t bucket_at = now;
  for (TokenBucket* b : {options_.client_bucket, options_.node_bucket}) {
    if (b != nullptr) bucket_at = std::max(bucket_at, b->Reserve(now, bytes));
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.paced_rate_Bps = rate;
  }
  int skips = 0;
  int64_t skipped_until = std::numeric_limits<int64_t>::min();
  for (;;) {
    if (cancelled()) return absl::CancelledError("qos: shaper cancelled");
    now = clock_->NowNs();
    if (now < pace_at) {
      SleepUntil(pace_at, Wait::kPace);
      continue;
    }
    if (now < bucket_at) {
      SleepUntil(bucket_at, Wait::kBucket);
      continue;
    }
    if (options_.gate == nullptr) break;
    int64_t wake_ns = now;
    if (GateAllows(now, bytes, &skips, &skipped_until, &wake_ns)) break;
    SleepUntil(wake_ns, Wait::kGate);
  }
  const bool new_window =
      options_.gate != nullptr && options_.gate->RecordSend(now);
  absl::MutexLock lock(&mu_);
  ++stats_.acquires;
  stats_.bytes += bytes;
  if (new_window) ++stats_.windows;
  return absl::OkStatus();
}

bool Shaper::GateAllows(int64_t now_ns, uint64_t bytes, int* skips,
                        int64_t* skipped_until_ns, int64_t* wake_ns) {
  CollectiveGate* gate = options_.gate;
  // Urgent: only an open collective holds bytes back, through the closed
  // path below (so a floor rate still applies).
  if (urgent_.load(std::memory_order_relaxed) &&
      !gate->CollectiveOpen(now_ns)) {
    return true;
  }
  if (!gate->MaySend(now_ns)) {
    const int64_t open_at = gate->NextOpenNs(now_ns);
    const double floor = gate->floor_Bps();
    if (floor > 0) {
      absl::MutexLock lock(&mu_);
      if (now_ns >= floor_next_ns_) {
        floor_next_ns_ = SaturatingAdd(now_ns, DurationNs(bytes, floor));
        return true;
      }
      *wake_ns = std::min(floor_next_ns_, open_at);
      return false;
    }
    *wake_ns = open_at;
    return false;
  }
  const double link = link_rate_Bps_.load(std::memory_order_relaxed);
  if (link > 0 && *skips < options_.max_window_skips) {
    const int64_t need = DurationNs(bytes, link);
    const int64_t until = gate->OpenUntilNs(now_ns);
    if (until != kForever && until - now_ns < need &&
        need <= gate->MaxIdleWindowNs(now_ns)) {
      if (until != *skipped_until_ns) {
        ++*skips;
        *skipped_until_ns = until;
      }
      *wake_ns = until;
      return false;
    }
  }
  return true;
}

void Shaper::SleepUntil(int64_t t_ns, Wait reason) {
  const int64_t before = clock_->NowNs();
  int64_t target = std::min(t_ns, SaturatingAdd(before, options_.max_sleep_ns));
  target = std::max(target, SaturatingAdd(before, 1));
  clock_->SleepUntilNs(target);
  const int64_t slept = clock_->NowNs() - before;
  if (reason == Wait::kGate) options_.gate->AddYieldNs(slept);
  absl::MutexLock lock(&mu_);
  switch (reason) {
    case Wait::kPace:
      stats_.pace_wait_ns += slept;
      break;
    case Wait::kBucket:
      stats_.bucket_wait_ns += slept;
      break;
    case Wait::kGate:
      stats_.yield_ns += slept;
      break;
  }
}

void Shaper::Cancel() { cancelled_.store(true, std::memory_order_release); }

bool Shaper::cancelled() const {
  return cancelled_.load(std::memory_order_acquire);
}

void Shaper::SetLinkRateHint(double rate_Bps) {
  link_rate_Bps_.store(std::isfinite(rate_Bps) && rate_Bps > 0 ? rate_Bps : 0,
                       std::memory_order_relaxed);
}

ShaperStats Shaper::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace stagger::qos
