#include "qos/pacer.h"

#include <algorithm>
#include <cmath>

namespace stagger::qos {
namespace {

double SanitizeRate(double r) { return std::isfinite(r) && r > 0 ? r : 0; }

// One booking never moves the schedule further than this (about 31 years).
constexpr double kMaxDurationNs = static_cast<double>(int64_t{1} << 60);

}  // namespace

void DeadlinePacer::Start(int64_t now_ns, uint64_t total_bytes,
                          int64_t deadline_ns, double floor_Bps,
                          double cap_Bps) {
  absl::MutexLock lock(&mu_);
  started_ = true;
  total_bytes_ = total_bytes;
  sent_bytes_ = 0;
  deadline_ns_ = deadline_ns;
  floor_Bps_ = SanitizeRate(floor_Bps);
  cap_Bps_ = SanitizeRate(cap_Bps);
  next_ns_ = now_ns;
  last_rate_Bps_ = kUnlimited;
}

double DeadlinePacer::RateLocked(int64_t now_ns, uint64_t remaining) const {
  if (!started_) return kUnlimited;
  const double cap = cap_Bps_ > 0 ? cap_Bps_ : kUnlimited;
  if (deadline_ns_ == 0 || now_ns >= deadline_ns_) return cap;
  double rate = static_cast<double>(remaining) * 1e9 /
                static_cast<double>(deadline_ns_ - now_ns);
  rate = std::max(rate, floor_Bps_);
  return std::min(rate, cap);
}

double DeadlinePacer::RateBps(int64_t now_ns) const {
  absl::MutexLock lock(&mu_);
  uint64_t remaining =
      total_bytes_ > sent_bytes_ ? total_bytes_ - sent_bytes_ : 0;
  return RateLocked(now_ns, remaining);
}

int64_t DeadlinePacer::Reserve(int64_t now_ns, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (!started_) return now_ns;
  // Bytes go at their place in the schedule, which may lag the current
  // time by the credit; they never go before now.
  const int64_t slot = std::max(now_ns - max_credit_ns_, next_ns_);
  const int64_t start = std::max(now_ns, slot);
  uint64_t remaining =
      total_bytes_ > sent_bytes_ ? total_bytes_ - sent_bytes_ : 0;
  // Bytes beyond the announced total are paced as the last ones.
  const double rate = RateLocked(start, std::max(remaining, bytes));
  sent_bytes_ += bytes;
  last_rate_Bps_ = rate;
  if (rate == kUnlimited || bytes == 0) {
    next_ns_ = start;
    return start;
  }
  double duration = std::round(static_cast<double>(bytes) * 1e9 / rate);
  next_ns_ = slot + static_cast<int64_t>(std::min(duration, kMaxDurationNs));
  return start;
}

void DeadlinePacer::set_max_credit_ns(int64_t ns) {
  absl::MutexLock lock(&mu_);
  max_credit_ns_ = std::max<int64_t>(ns, 0);
}

bool DeadlinePacer::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

uint64_t DeadlinePacer::total_bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

uint64_t DeadlinePacer::sent_bytes() const {
  absl::MutexLock lock(&mu_);
  return sent_bytes_;
}

int64_t DeadlinePacer::deadline_ns() const {
  absl::MutexLock lock(&mu_);
  return deadline_ns_;
}

double DeadlinePacer::last_rate_Bps() const {
  absl::MutexLock lock(&mu_);
  return last_rate_Bps_;
}

}  // namespace stagger::qos
