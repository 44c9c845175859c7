// Histogram: a fixed-bucket latency histogram for the metrics endpoint,
// Prometheus style (cumulative buckets, a sum and a count). Observe is
// lock-free; Snapshot is consistent enough for a scrape (each field is read
// atomically; a concurrent Observe may show in some fields and not others).
//
// Thread-safety: thread-safe.
#ifndef STAGGER_METRICS_HISTOGRAM_H_
#define STAGGER_METRICS_HISTOGRAM_H_

#include <atomic>
#include <cstdint>
#include <vector>

namespace stagger::metrics {

class Histogram {
 public:
  struct Snapshot {
    std::vector<double> bounds;        // upper bounds, ascending (seconds)
    std::vector<uint64_t> cumulative;  // observations <= each bound
    uint64_t count = 0;                // all observations (the +Inf bucket)
    double sum = 0;
  };

  // Upper bounds in seconds, ascending; the default suits disk and network
  // latencies: 100 us to 10 s.
  explicit Histogram(std::vector<double> bounds = DefaultLatencyBounds());

  void Observe(double seconds);
  Snapshot Take() const;

  static std::vector<double> DefaultLatencyBounds();

 private:
  const std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> buckets_;  // one more: above the last
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace stagger::metrics

#endif  // STAGGER_METRICS_HISTOGRAM_H_
