#include "client/wire_rate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "qos/clock.h"

namespace stagger::client {
namespace {

using qos::kMs;

TEST(WireRateTest, NothingMeasuredIsZero) {
  WireRate r;
  EXPECT_EQ(r.Bps(), 0);
  r.Add(5 * kMs, 1000, 0);  // bytes, but no busy time yet
  EXPECT_EQ(r.Bps(), 0);
}

TEST(WireRateTest, AcksArrivingTogetherDoNotInflateTheRate) {
  // Five 4 MB chunks leave over 200 ms; one group commit acknowledges all
  // five at once, so the first ack carries the 200 ms and the rest none.
  WireRate r;
  r.Add(200 * kMs, 4'000'000, 200 * kMs);
  for (int i = 0; i < 4; ++i) r.Add(200 * kMs, 4'000'000, 0);
  EXPECT_DOUBLE_EQ(r.Bps(), 100e6);
}

TEST(WireRateTest, OlderCompletionsWeighLessWithTheirAge) {
  WireRate r(/*time_constant_s=*/1.0);
  r.Add(0, 100'000'000, 1000 * kMs);          // 100 MB/s
  r.Add(1000 * kMs, 50'000'000, 1000 * kMs);  // 50 MB/s, 1 s later
  const double w = std::exp(-1.0);
  EXPECT_NEAR(r.Bps(), (100e6 * w + 50e6) / (w + 1.0), 1.0);
  // Long after, only the recent rate counts.
  for (int i = 2; i < 30; ++i) r.Add(i * 1000 * kMs, 50'000'000, 1000 * kMs);
  EXPECT_NEAR(r.Bps(), 50e6, 1e3);
}

}  // namespace
}  // namespace stagger::client
