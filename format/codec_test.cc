#include "format/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace stagger::format {
namespace {

TEST(CodecTest, ZstdRoundTripCompressibleData) {
  std::string raw(1 << 20, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i % 17);
  std::string enc;
  auto codec = Encode(Codec::kZstd, raw, &enc);
  ASSERT_TRUE(codec.ok());
  EXPECT_EQ(*codec, Codec::kZstd);
  EXPECT_LT(enc.size(), raw.size() / 10);
  std::string out(raw.size(), '\x01');
  ASSERT_TRUE(Decode(Codec::kZstd, enc, out.data(), out.size()).ok());
  EXPECT_EQ(out, raw);
}

TEST(CodecTest, IncompressibleDataFallsBackToRaw) {
  std::mt19937 rng(5);
  std::string raw(65536, '\0');
  for (auto& c : raw) c = static_cast<char>(rng());
  std::string enc;
  auto codec = Encode(Codec::kZstd, raw, &enc);
  ASSERT_TRUE(codec.ok());
  EXPECT_EQ(*codec, Codec::kRaw);
  EXPECT_EQ(enc, raw);
}

// Float-like data: small values around zero, as weights are.
std::string Floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::string s(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    float f = d(rng);
    std::memcpy(&s[i * 4], &f, 4);
  }
  return s;
}

TEST(CodecTest, ByteGroupingRoundTripsEveryWidthAndTail) {
  std::string base = Floats(50000, 9);
  for (int w : {2, 4, 8}) {
    for (size_t len :
         {base.size(), base.size() - 1, base.size() - 3, 8ul, 7ul}) {
      std::string raw = base.substr(0, len);
      std::string enc;
      EncodeOptions o;
      o.element_size = w;
      auto codec = Encode(Codec::kByteGroupZstd, raw, &enc, o);
      ASSERT_TRUE(codec.ok()) << codec.status();
      std::string out(raw.size(), '\x7f');
      ASSERT_TRUE(Decode(*codec, enc, out.data(), out.size()).ok());
      EXPECT_EQ(out, raw) << "w " << w << " len " << len;
    }
  }
}

TEST(CodecTest, ByteGroupingCompressesFloatsBetterThanZstd) {
  std::string raw = Floats(1 << 18, 3);  // 1 MiB of fp32
  std::string plain, grouped;
  ASSERT_EQ(*Encode(Codec::kZstd, raw, &plain), Codec::kZstd);
  EncodeOptions o;
  o.element_size = 4;
  ASSERT_EQ(*Encode(Codec::kByteGroupZstd, raw, &grouped, o),
            Codec::kByteGroupZstd);
  EXPECT_LT(grouped.size(), plain.size());
  EXPECT_EQ(grouped[0], 4);
}

TEST(CodecTest, ByteGroupingRejectsBadWidths) {
  std::string enc;
  EncodeOptions o;
  o.element_size = 3;
  EXPECT_EQ(Encode(Codec::kByteGroupZstd, "abcdef", &enc, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string out(8, '\0');
  EXPECT_EQ(Decode(Codec::kByteGroupZstd, std::string("\x03xyz"), out.data(),
                   out.size())
                .code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Decode(Codec::kByteGroupZstd, "", out.data(), out.size()).code(),
            absl::StatusCode::kDataLoss);
}

TEST(CodecTest, XorDeltaRoundTripsAndBeatsFullEncoding) {
  std::string base = Floats(1 << 18, 21);
  std::string next = base;
  // A small update to every weight: low mantissa bits change.
  for (size_t i = 0; i < next.size(); i += 4) next[i] ^= 0x15;
  ChunkId base_id = ChunkId::Of(base.data(), base.size());
  for (int w : {1, 2, 4, 8}) {
    EncodeOptions o;
    o.element_size = w;
    std::string delta;
    auto codec = EncodeDelta(next, base, base_id, &delta, o);
    ASSERT_TRUE(codec.ok()) << codec.status();
    ASSERT_TRUE(IsDelta(*codec)) << w;
    EXPECT_EQ(*DeltaBase(delta), base_id);
    std::string out(next.size(), '\0');
    ASSERT_TRUE(DecodeDelta(*codec, delta, base, out.data(), out.size()).ok());
    EXPECT_EQ(out, next);
    // Plain Decode cannot do it alone.
    EXPECT_EQ(Decode(*codec, delta, out.data(), out.size()).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  EncodeOptions o4;
  o4.element_size = 4;
  std::string full, delta;
  ASSERT_TRUE(Encode(Codec::kByteGroupZstd, next, &full, o4).ok());
  auto used = EncodeDelta(next, base, base_id, &delta, o4);
  ASSERT_TRUE(used.ok());
  EXPECT_LT(delta.size() * 3, full.size());
  // Wrong base bytes or lengths are caught.
  std::string out(next.size(), '\0');
  EXPECT_EQ(
      DecodeDelta(*used, delta, base.substr(1), out.data(), out.size()).code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      DecodeDelta(*used, delta.substr(0, 10), base, out.data(), out.size())
          .code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      DecodeDelta(Codec::kZstd, delta, base, out.data(), out.size()).code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      EncodeDelta(next, base.substr(4), base_id, &delta, o4).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(CodecTest, XorDeltaRoundTripsEveryWidthAtOddLengths) {
  // Lengths whose element counts are not multiples of the word-at-a-time
  // loops (4 elements of 2 bytes, 2 of 4), with and without a byte tail.
  for (size_t len : {1, 7, 8, 9, 15, 17, 4099, 65543}) {
    std::string base = Floats(len / 4 + 1, 3).substr(0, len);
    std::string next = base;
    for (size_t i = 0; i < next.size(); i += 3) next[i] ^= 0x5a;
    const ChunkId base_id = ChunkId::Of(base.data(), base.size());
    for (int w : {1, 2, 4, 8}) {
      EncodeOptions o;
      o.element_size = w;
      std::string delta;
      auto codec = EncodeDelta(next, base, base_id, &delta, o);
      ASSERT_TRUE(codec.ok()) << codec.status();
      std::string out(next.size(), '\0');
      if (*codec == Codec::kRaw) {
        EXPECT_EQ(delta, next) << len << " " << w;
        continue;
      }
      ASSERT_TRUE(
          DecodeDelta(*codec, delta, base, out.data(), out.size()).ok());
      EXPECT_EQ(out, next) << len << " " << w;
      // Both delta codecs, whichever EncodeDelta picked.
      for (Codec c :
           {Codec::kXorByteGroupZstd, Codec::kNumDeltaByteGroupZstd}) {
        if (w == 1 && c == Codec::kNumDeltaByteGroupZstd) continue;
        std::string d;
        auto got = EncodeDeltaWith(c, next, base, base_id, &d, o);
        ASSERT_TRUE(got.ok()) << got.status();
        if (*got == Codec::kRaw) continue;
        std::fill(out.begin(), out.end(), '\0');
        ASSERT_TRUE(DecodeDelta(c, d, base, out.data(), out.size()).ok());
        EXPECT_EQ(out, next) << len << " " << w << " " << CodecName(c);
      }
    }
  }
}

// Floats moved by small amounts: the numeric delta (the difference of
// their order-preserving integer forms) is small even where the XOR is not
// (a step across a power of two flips exponent and mantissa bits).
TEST(CodecTest, NumericDeltaRoundTripsEveryBitPatternAndWinsOnSmallSteps) {
  std::mt19937 rng(17);
  // Every special value, both ways: +-0, +-inf, NaNs, denormals, extremes.
  const std::vector<uint32_t> specials = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001,
      0x00000001, 0x80000001, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000};
  std::string base(4 * 4096, '\0'), next(4 * 4096, '\0');
  for (size_t i = 0; i < 4096; ++i) {
    uint32_t a = i < specials.size() ? specials[i] : rng();
    uint32_t b = specials[(i * 7) % specials.size()];
    if (i >= specials.size() * specials.size()) b = a + (rng() % 9) - 4;
    std::memcpy(&base[4 * i], &a, 4);
    std::memcpy(&next[4 * i], &b, 4);
  }
  const ChunkId base_id = ChunkId::Of(base.data(), base.size());
  EncodeOptions o;
  o.element_size = 4;
  std::string d;
  auto c = EncodeDeltaWith(Codec::kNumDeltaByteGroupZstd, next, base, base_id,
                           &d, o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(*c, Codec::kNumDeltaByteGroupZstd);
  std::string out(next.size(), '\0');
  ASSERT_TRUE(DecodeDelta(*c, d, base, out.data(), out.size()).ok());
  EXPECT_EQ(out, next);

  // Weights near 1.0 (exponent boundary) stepping by a few ulps.
  std::string w0(4 << 16, '\0'), w1 = w0;
  for (size_t i = 0; i < (1u << 16); ++i) {
    float f = 1.0f + (static_cast<int>(rng() % 64) - 32) * 1e-7f;
    float g = std::nextafter(f, (rng() & 1) ? 2.0f : 0.0f);
    std::memcpy(&w0[4 * i], &f, 4);
    std::memcpy(&w1[4 * i], &g, 4);
  }
  const ChunkId w0_id = ChunkId::Of(w0.data(), w0.size());
  std::string x, n;
  ASSERT_EQ(*EncodeDeltaWith(Codec::kXorByteGroupZstd, w1, w0, w0_id, &x, o),
            Codec::kXorByteGroupZstd);
  ASSERT_EQ(
      *EncodeDeltaWith(Codec::kNumDeltaByteGroupZstd, w1, w0, w0_id, &n, o),
      Codec::kNumDeltaByteGroupZstd);
  EXPECT_LT(n.size() * 3 / 2, x.size()) << n.size() << " vs " << x.size();
  // EncodeDelta picks it from its sample.
  std::string picked;
  EXPECT_EQ(*EncodeDelta(w1, w0, w0_id, &picked, o),
            Codec::kNumDeltaByteGroupZstd);
  EXPECT_EQ(picked.size(), n.size());
  // Not for a reader that does not know it.
  EncodeOptions xor_only = o;
  xor_only.numeric_delta = false;
  EXPECT_EQ(*EncodeDelta(w1, w0, w0_id, &picked, xor_only),
            Codec::kXorByteGroupZstd);
  // Width 1 has no numeric form.
  o.element_size = 1;
  EXPECT_EQ(EncodeDeltaWith(Codec::kNumDeltaByteGroupZstd, w1, w0, w0_id, &n, o)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CodecTest, DecodeRejectsWrongLengthsAndGarbage) {
  std::string raw(4096, 'a');
  std::string enc;
  ASSERT_EQ(*Encode(Codec::kZstd, raw, &enc), Codec::kZstd);
  std::string out(4095, '\0');
  EXPECT_EQ(Decode(Codec::kZstd, enc, out.data(), out.size()).code(),
            absl::StatusCode::kDataLoss);
  std::string garbage = "not a zstd frame at all";
  std::string out2(4096, '\0');
  EXPECT_EQ(Decode(Codec::kZstd, garbage, out2.data(), out2.size()).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Decode(Codec::kRaw, "abc", out2.data(), 4).code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace stagger::format
