#include "client/codec_policy.h"

#include <gtest/gtest.h>

namespace stagger::client {
namespace {

int EncodedOf(CodecPolicy& p, int n) {
  int k = 0;
  for (int i = 0; i < n; ++i) k += p.ShouldEncode() ? 1 : 0;
  return k;
}

TEST(CodecPolicy, EncodesEverythingUntilBothSidesAreMeasured) {
  CodecPolicy p(2);
  EXPECT_EQ(EncodedOf(p, 10), 10);
  p.OnEncoded(4 << 20, 1 << 20, 0.04);  // 100 MB/s per thread
  EXPECT_EQ(p.encode_fraction(), 1.0);
  EXPECT_EQ(EncodedOf(p, 10), 10);
}

TEST(CodecPolicy, EncodesEverythingWhenTheWireIsTheBottleneck) {
  CodecPolicy p(2);
  // Encoders: 2 x 400 MB/s, ratio 0.25; wire 100 MB/s: even fully
  // encoded the wire limits (it carries 400 MB/s of raw bytes at r=0.25).
  p.OnEncoded(400'000'000, 100'000'000, 1.0);
  p.OnWire(100'000'000);
  EXPECT_EQ(p.encode_fraction(), 1.0);
  EXPECT_EQ(EncodedOf(p, 100), 100);
}

TEST(CodecPolicy, MixesWhenEncodingIsTheBottleneck) {
  CodecPolicy p(2);
  // T*E = 2 x 250 MB/s = 500 MB/s, r = 0.5, W = 1000 MB/s:
  // f* = 500 / (1000 + 500 * 0.5) = 0.4, X = 1000 + 250 = 1250 MB/s.
  p.OnEncoded(250'000'000, 125'000'000, 1.0);
  p.OnWire(1'000'000'000);
  EXPECT_NEAR(p.encode_fraction(), 0.4, 1e-9);
  EXPECT_EQ(EncodedOf(p, 100), 40);
  EXPECT_EQ(EncodedOf(p, 5), 2);
}

TEST(CodecPolicy, IncompressibleDataOnAFastWireStillKeepsSampling) {
  CodecPolicy p(1);
  // r = 1 (nothing gained), T*E = 100 MB/s, W = 1000 MB/s: f* = 0.1.
  p.OnEncoded(100'000'000, 100'000'000, 1.0);
  p.OnWire(1'000'000'000);
  EXPECT_NEAR(p.encode_fraction(), 0.1, 1e-9);
  EXPECT_EQ(EncodedOf(p, 50), 5);
}

TEST(CodecPolicy, FollowsAChangeOfTheWire) {
  CodecPolicy p(1);
  p.OnEncoded(200'000'000, 100'000'000, 1.0);
  p.OnWire(2'000'000'000);  // fast: f* = 200 / (2000 + 100) < 0.1
  EXPECT_LT(p.encode_fraction(), 0.1);
  // The link slows to 50 MB/s (e.g. paced): everything is encoded again.
  p.OnWire(50'000'000);
  EXPECT_EQ(p.encode_fraction(), 1.0);
}

TEST(CodecPolicy, IgnoresEmptySamples) {
  CodecPolicy p(1);
  p.OnEncoded(0, 0, 1.0);
  p.OnEncoded(100, 50, 0);
  p.OnWire(0);
  p.OnWire(-1);
  EXPECT_EQ(p.encode_fraction(), 1.0);
}

}  // namespace
}  // namespace stagger::client
