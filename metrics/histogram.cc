#include "metrics/histogram.h"

#include <algorithm>

namespace stagger::metrics {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1) {}

std::vector<double> Histogram::DefaultLatencyBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

void Histogram::Observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // also NaN
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) -
                   bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9),
                    std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  s.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  running += buckets_.back().load(std::memory_order_relaxed);
  s.count = running;
  s.sum = sum_ns_.load(std::memory_order_relaxed) * 1e-9;
  return s;
}

}  // namespace stagger::metrics
